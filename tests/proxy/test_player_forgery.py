"""Issue 24, item 3: the player and `audit export` never show forged frames as verified.

The attack, as a writer of the sessions folder does it: overwrite `screen.rfbrec` of a signed, anchored session with
forged bytes of the same size, let the custodian service's background preparation decode them, then put the genuine
bytes back with the old modification time. A cache keyed by size and mtime then serves the forged frames while
verification (which reads the genuine bytes) says `verified`. What is shown must be decoded from bytes whose hash is
the one in the verified seal."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tests.proxy.test_seals as seals
from deploy.audit.cli import verify_site_session
from deploy.site.folder import Site
from proxy.audit.evidence import judge
from proxy.audit.player import prepare, prepare_ended
from tests.proxy.test_seals import SiteFiles, ordered, record_sessions

REPO = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 64, 48  # the fake VNC server's screen
GENUINE_PIXEL = b"\x10\x20\x30\x00"
FORGED_PIXEL = b"\x00\x00\xf0\x00"
# one FramebufferUpdate covering the whole screen with one colour (Raw encoding)
FULL_UPDATE = b"\x00\x00\x00\x01" + struct.pack(">HHHHi", 0, 0, WIDTH, HEIGHT, 0) + GENUINE_PIXEL * WIDTH * HEIGHT
needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is installed by scripts/setup.sh")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    """A site with one session sealed and signed by its gateway, whose screen is one full-screen update."""
    site = SiteFiles.create(tmp_path_factory.mktemp("forgery") / "site")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seals, "UPDATE", FULL_UPDATE)
        record_sessions(site, 1)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    return recorded.copy_to(tmp_path / "site")


def forged_bytes(genuine: bytes) -> bytes:
    forged = genuine.replace(GENUINE_PIXEL, FORGED_PIXEL)
    assert len(forged) == len(genuine) and forged.count(FORGED_PIXEL) > WIDTH * HEIGHT // 2
    return forged


def put(path: Path, data: bytes, stat: os.stat_result) -> None:
    """Write `data` and give the file the modification time it had (`stat`): size and mtime as before."""
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def sealed_sha(folder: Path) -> str:
    return json.loads((folder / "events.jsonl").read_bytes().splitlines()[-1])["recording"]["sha256"]


def attack(site: SiteFiles, cache: Path) -> tuple[Path, bytes, bytes]:
    """Forge, let the background preparation decode the forgery, restore the genuine bytes with the old mtime."""
    (folder,) = ordered(site)
    screen = folder / "screen.rfbrec"
    genuine, stat = screen.read_bytes(), screen.stat()
    forged = forged_bytes(genuine)
    put(screen, forged, stat)
    assert prepare_ended(site.sessions, cache) == [folder.name]  # the service's background preparation
    put(screen, genuine, stat)
    after = screen.stat()
    assert (after.st_size, after.st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    return folder, genuine, forged


def test_the_player_decodes_the_bytes_it_hashed_never_a_cache_of_forged_ones(site: SiteFiles,
                                                                              tmp_path: Path) -> None:
    (folder,) = ordered(site)
    truth = prepare(folder, tmp_path / "clean").frame_at(1e9)  # the genuine screen, from a cache of its own
    cache = tmp_path / "cache"
    folder, genuine, forged = attack(site, cache)
    player = prepare(folder, cache)
    assert player.sha256 == sealed_sha(folder)
    assert np.array_equal(player.frame_at(1e9), truth)  # the genuine frames, not the forged ones cached before
    check = verify_site_session(Site(site.root), folder)
    assert check.ok, check.findings
    assert judge(folder, check, player.sha256).verified

    # the other order: the genuine bytes when verification reads, the forged ones when the player reads
    put(folder / "screen.rfbrec", forged, (folder / "screen.rfbrec").stat())
    shown_player = prepare(folder, cache)
    assert not np.array_equal(shown_player.frame_at(1e9), truth)
    shown = judge(folder, check, shown_player.sha256)
    assert check.ok and not shown.verified and not shown.matches_seal
    assert shown.sealed_sha256 == sealed_sha(folder) and shown.decoded_sha256 == shown_player.sha256
    assert any("tampered" in finding and shown_player.sha256 in finding for finding in shown.findings)


@pytest.fixture
def api(site: SiteFiles):
    from deploy.custodian.api import create_app
    from deploy.provision import Provisioner

    provisioner = Provisioner(Site(site.root))
    key = provisioner.records.add_key("aud", "auditor")
    with TestClient(create_app(provisioner, expiry_interval=None)) as client:
        yield client, {"Authorization": f"Bearer {key}"}
    provisioner.close()


def test_the_web_player_serves_the_sealed_frames_or_says_tampered(site: SiteFiles, api, tmp_path: Path) -> None:
    client, auth = api
    (folder,) = ordered(site)
    clean = prepare(folder, tmp_path / "clean")
    genuine_frames = (clean.folder / "frames.bin").read_bytes()
    _, genuine, forged = attack(site, Site(site.root).player_cache)
    index = client.get(f"/audit/sessions/{folder.name}/player", headers=auth).json()
    assert index["verified"] is True and index["integrity"]["matches_seal"] is True
    frames = client.get(index["frames_url"], headers=auth)
    assert frames.status_code == 200 and frames.content == genuine_frames  # not the forged frames cached before

    put(folder / "screen.rfbrec", forged, (folder / "screen.rfbrec").stat())
    index = client.get(f"/audit/sessions/{folder.name}/player", headers=auth).json()
    assert index["verified"] is False
    integrity = index["integrity"]
    assert integrity["matches_seal"] is False and integrity["sealed_sha256"] == sealed_sha(folder)
    assert any("tampered" in finding for finding in integrity["findings"])
    assert client.get(index["frames_url"], headers=auth).content != genuine_frames  # shown, as tampered
    # frames are named by the hash of the bytes they were decoded from; without it nothing is served
    assert client.get(f"/audit/sessions/{folder.name}/frames", headers=auth).status_code == 409
    assert client.get(f"/audit/sessions/{folder.name}/frames?sha256=../../x", headers=auth).status_code == 409


def mean_colour(video: Path) -> np.ndarray:
    """The mean colour of the video's last frame (the screen after the session's update)."""
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8)[-WIDTH * HEIGHT * 3:].reshape(-1, 3).mean(axis=0)


def export(site: SiteFiles, folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", "export", str(folder), "--site",
                           str(site.root), "--out", str(out), "--json", *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@needs_ffmpeg
def test_export_after_the_attack_writes_the_genuine_frames(site: SiteFiles, tmp_path: Path) -> None:
    (folder,) = ordered(site)
    clean = prepare(folder, tmp_path / "clean").frame_at(1e9).reshape(-1, 3).mean(axis=0)
    folder, _, _ = attack(site, Site(site.root).player_cache)
    out = tmp_path / "case.mp4"
    done = export(site, folder, out)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["verified"] is True and summary["recording_sha256"] == sealed_sha(folder)
    assert np.abs(mean_colour(out) - clean).max() < 8  # the genuine screen (the forged one is another colour)


@needs_ffmpeg
def test_export_refuses_a_recording_swapped_after_verification(site: SiteFiles, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    """Verification reads the genuine bytes, the player's read gets the forged ones: refused, or UNVERIFIED."""
    import proxy.audit.player as player
    from safeshare.cli import main

    (folder,) = ordered(site)
    screen = folder / "screen.rfbrec"
    genuine, stat = screen.read_bytes(), screen.stat()
    read_source = player.read_source

    def swapped_then_read(where: Path):
        put(screen, forged_bytes(genuine), stat)
        return read_source(where)

    monkeypatch.setattr(player, "read_source", swapped_then_read)
    out = tmp_path / "case.mp4"
    args = ["audit", "export", str(folder), "--site", str(site.root), "--out", str(out), "--json"]
    assert main(args) == 1 and not out.exists()
    assert "tampered: the frames were decoded from bytes with SHA-256" in capsys.readouterr().err
    put(screen, genuine, stat)
    assert main([*args, "--force"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["verified"] is False and summary["recording_sha256"] != sealed_sha(folder)
    comment = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json",
                              str(out)], capture_output=True, text=True, check=True).stdout
    assert json.loads(comment)["format"]["tags"]["comment"].startswith("safeshare: UNVERIFIED session")
    exported = seals.export_events(site)
    assert [(e["outcome"], e["verified"]) for e in exported] == [("refused", False), ("unverified", False)]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by scripts/setup.sh")
def test_the_player_page_says_tampered_never_verified(site: SiteFiles, tmp_path: Path) -> None:
    """The web player in headless Chromium: the genuine recording is shown as verified; forged bytes of the same size
    with the old modification time are shown as TAMPERED."""
    import asyncio

    import aiohttp

    from deploy.custodian.api import create_app
    from deploy.provision import Provisioner
    from tests.cdp import chromium, wait_for_js
    from tests.served import served

    (folder,) = ordered(site)
    screen = folder / "screen.rfbrec"
    genuine, stat = screen.read_bytes(), screen.stat()
    provisioner = Provisioner(Site(site.root))
    key = provisioner.records.add_key("aud", "auditor")
    titles: list[str] = []

    async def shown_title(cdp) -> str:
        await cdp.evaluate(f"window.player.open({key!r}, {folder.name!r})")
        await wait_for_js(cdp, "window.player.state === 'ready' || window.player.error", timeout=30)
        return await cdp.evaluate("document.getElementById('title').textContent")

    async def run() -> None:
        async with aiohttp.ClientSession() as http, chromium(tmp_path, http) as cdp:
            await cdp.navigate(f"{base}/player")
            await wait_for_js(cdp, "window.player && window.player.state === 'idle'")
            titles.append(await shown_title(cdp))
            await asyncio.to_thread(put, screen, forged_bytes(genuine), stat)
            titles.append(await shown_title(cdp))

    try:
        with served(create_app(provisioner, expiry_interval=None)) as base:
            asyncio.run(run())
    finally:
        provisioner.close()
    assert titles[0].endswith(" · verified"), titles
    assert "TAMPERED" in titles[1] and "verified" not in titles[1], titles
