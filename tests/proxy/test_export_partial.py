"""`audit export --allow-partial` (issue 24, item 2 follow-up): a session a restarted gateway recovered is proven only
up to the last checkpoint the gateway signed while it ran. `audit verify --allow-partial` accepted it as PARTIAL, but
`audit export` had no such flag: it refused, or with --force stamped the video UNVERIFIED, which says nothing of the
proven part. Now --allow-partial exports it stamped PARTIAL: the video's comment, the summary and the audit event say
"partial: verified up to checkpoint at line N (...), the rest unverifiable", never "verified".

The session is made as in tests/proxy/test_recovered_checkpoints.py: a real session through the real gateway, the
gateway "killed" (its seal and row removed), then restarted, which recovers and seals it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_inprocess import run_cli
from tests.proxy.test_recovered_checkpoints import clear_row, events_of, gateway_run, only_session, rewrite
from tests.proxy.test_seals import REPO, SiteFiles, export_events

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
                                  reason="ffmpeg is installed by scripts/setup.sh")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    site = SiteFiles.create(tmp_path_factory.mktemp("export-partial") / "site")
    gateway_run(site, body=True)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    return recorded.copy_to(tmp_path / "site")


def recover(site: SiteFiles, drop=lambda event: False) -> tuple[Path, dict]:
    """The gateway killed after its last checkpoint (log as it was, or with `drop`ped events), then restarted: the
    session is sealed as recovered. Returns the folder and the last checkpoint before the kill."""
    folder = only_session(site)
    last = [e for e in events_of(folder) if e["event"] == "checkpoint"][-1]
    rewrite(folder, drop)
    clear_row(site, folder.name)
    gateway_run(site)
    assert events_of(folder)[-1]["event"] == "seal" and events_of(folder)[-1].get("recovered")
    return folder, last


def export(site: SiteFiles, folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", "export", str(folder), "--site",
                           str(site.root), "--out", str(out), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=180)


def export_in_process(site: SiteFiles, folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """The same `audit export` through main(argv) in this process (no interpreter start); `export` above keeps a real
    run for each exit code, 0 and 1."""
    return run_cli("audit", "export", str(folder), "--site", str(site.root), "--out", str(out), *extra)


def comment(video: Path) -> str:
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json",
                            str(video)], capture_output=True, text=True, check=True)
    return json.loads(probe.stdout)["format"]["tags"]["comment"]


@needs_ffmpeg
def test_a_recovered_session_is_exported_stamped_partial_never_verified(site: SiteFiles, tmp_path: Path) -> None:
    folder, last = recover(site)
    line, size = last["seq"] + 1, last["recording"]["bytes"]
    refused = export(site, folder, tmp_path / "refused.mp4")
    assert refused.returncode == 1 and not (tmp_path / "refused.mp4").exists(), refused.stderr
    assert "PARTIAL" in refused.stderr and "--allow-partial" in refused.stderr

    out = tmp_path / "case.mp4"
    done = export_in_process(site, folder, out, "--allow-partial", "--json")
    assert done.returncode == 0 and out.is_file(), done.stderr
    summary = json.loads(done.stdout)
    assert summary["verified"] is False
    partial = summary["partial"]
    assert partial["checkpoint_line"] == line and partial["verified_lines"] == line
    assert partial["unverified_lines"] >= 1 and partial["recording_proven_bytes"] == size
    assert 0 < partial["recording_proven_seconds"] <= summary["duration"]
    stamp = comment(out)
    assert stamp == summary["stamp"]
    assert stamp.startswith(f"safeshare: PARTIAL session {folder.name}"), stamp
    assert f"partial: verified up to checkpoint at line {line}" in stamp and "the rest unverifiable" in stamp
    assert f"first {size} bytes" in stamp and "verified session" not in stamp

    text = export_in_process(site, folder, tmp_path / "again.mp4", "--allow-partial")
    assert text.returncode == 0 and "PARTIAL: partial: verified up to checkpoint" in text.stdout, text.stdout
    events = export_events(site)
    assert [(e["outcome"], e["verified"]) for e in events] == [("refused", False), ("partial", False),
                                                               ("partial", False)]
    assert events[1]["partial"]["checkpoint_line"] == line


@needs_ffmpeg
def test_allow_partial_does_not_pass_a_log_rewritten_before_its_checkpoint(site: SiteFiles, tmp_path: Path) -> None:
    folder, _ = recover(site, drop=lambda event: event.get("event") == "key" and event.get("keysym") == 0x62)
    done = export_in_process(site, folder, tmp_path / "case.mp4", "--allow-partial")
    assert done.returncode == 1 and not (tmp_path / "case.mp4").exists(), done.stdout + done.stderr
    assert "does not verify" in done.stderr


@needs_ffmpeg
def test_an_intact_session_is_still_exported_verified(site: SiteFiles, tmp_path: Path) -> None:
    folder = only_session(site)
    out = tmp_path / "case.mp4"
    done = export(site, folder, out, "--allow-partial", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["verified"] is True and summary["partial"] is None
    assert comment(out).startswith(f"safeshare: verified session {folder.name}")
