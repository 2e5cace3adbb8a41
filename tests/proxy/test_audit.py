"""Auditors' tools on real recorded sessions (the proxy against a scripted VNC server): an intact session verifies,
each kind of tampering is found and located, summaries count what happened, filters select sessions."""
from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from proxy.audit.sessions import find_sessions, summarize
from proxy.audit.verify import verify_path, verify_session
from proxy.eventlog import EventLog
from proxy.limits import SessionLimits
from safeshare.signing import TrustStore
from tests.proxy.rfbtools import FakeVncServer, RfbClient
from tests.proxy.test_controls import _with_proxy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real session: keys (one a blocked shortcut), a click, clipboard both ways, screen updates."""
    tmp = tmp_path_factory.mktemp("recorded")
    secret = b"CLIP" * 10
    update = b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x02\x00\x01\x00\x00\x00\x00" + b"\x10\x20\x30\x00" * 2
    fake = FakeVncServer(script=b"\x03\x00\x00\x00" + len(secret).to_bytes(4, "big") + secret + update)

    async def body(port: int) -> None:
        client = RfbClient()
        await client.connect(port)
        await client.read_update()
        await client.cut_text(secret)
        for sym, down in [(0x61, True), (0x61, False), (0xFFE3, True), (0x6E, True), (0x6E, False),
                          (0xFFE3, False)]:  # a, then Ctrl+N (blocked)
            await client.key(sym, down)
        await client.pointer(1, 10, 10)
        await client.pointer(0, 10, 10)
        await asyncio.sleep(0.3)
        await client.close()

    folder, _ = asyncio.run(_with_proxy(tmp, fake, SessionLimits(), body))
    return folder


def copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "sessions" / folder.name
    shutil.copytree(folder, target)
    return target


def findings(folder: Path) -> list[tuple[str, int | None, str]]:
    return [(Path(f.file).name, f.line, f.problem) for f in verify_session(folder).findings]


def test_intact_session_verifies_with_its_recording_sealed(recorded: Path) -> None:
    check = verify_session(recorded)
    assert check.ok, check.findings
    assert check.sealed and check.lines > 8
    seal = json.loads((recorded / "events.jsonl").read_text().splitlines()[-1])
    assert seal["recording"]["bytes"] == (recorded / "screen.rfbrec").stat().st_size
    assert json.loads((recorded / "meta.json").read_text())["log_head"] == check.head


def _lines(folder: Path) -> list[bytes]:
    return (folder / "events.jsonl").read_bytes().splitlines(keepends=True)


def test_altered_removed_reordered_lines_are_located(recorded: Path, tmp_path: Path) -> None:
    lines = _lines(recorded)
    altered = copy(recorded, tmp_path / "a")
    changed = lines[:]
    changed[3] = changed[3].replace(b'"seq":3', b'"seq":3 ', 1)
    (altered / "events.jsonl").write_bytes(b"".join(changed))
    # the altered line is reported as itself (line 4), not as the line whose link broke (line 5)
    assert findings(altered) == [("events.jsonl", 4, "altered: line 5 chains to a different line than this one")]

    prev_field = copy(recorded, tmp_path / "p")
    record = json.loads(lines[3])
    record["prev"] = "1" * 64
    (prev_field / "events.jsonl").write_bytes(b"".join(lines[:3] + [json.dumps(record).encode() + b"\n"]
                                                       + lines[4:]))
    assert findings(prev_field) == [("events.jsonl", 4, "altered: its 'prev' field no longer names the line "
                                                        "before it")]

    removed = copy(recorded, tmp_path / "r")
    (removed / "events.jsonl").write_bytes(b"".join(lines[:2] + lines[3:]))
    assert findings(removed) == [("events.jsonl", 3, "1 line(s) removed before this line (its sequence number "
                                                     "is 3, line 3 should hold 2)")]

    inserted = copy(recorded, tmp_path / "i")  # a well-chained line slipped in after line 3
    forged = {"seq": 3, "t": 1.0, "event": "key", "down": True, "keysym": 97,
              "prev": hashlib.sha256(lines[2].rstrip(b"\n")).hexdigest()}
    (inserted / "events.jsonl").write_bytes(b"".join(lines[:3] + [json.dumps(forged).encode() + b"\n"]
                                                      + lines[3:]))
    assert findings(inserted) == [("events.jsonl", 4, "1 line(s) inserted here: line 5 has sequence number 3, so "
                                                      "lines 4-4 are not part of the chain")]

    swapped = copy(recorded, tmp_path / "s")
    order = lines[:]
    order[4], order[5] = order[5], order[4]
    (swapped / "events.jsonl").write_bytes(b"".join(order))
    assert findings(swapped)[0] == ("events.jsonl", 5, "out of order: this line follows line 6 in the hash chain")


def test_truncated_files_are_found(recorded: Path, tmp_path: Path) -> None:
    data = (recorded / "events.jsonl").read_bytes()
    mid_line = copy(recorded, tmp_path / "m")
    (mid_line / "events.jsonl").write_bytes(data[:-20])
    (name, line, problem), *rest = findings(mid_line)
    assert name == "events.jsonl" and problem == "last line is truncated" and line == len(data.splitlines())

    no_seal = copy(recorded, tmp_path / "n")
    (no_seal / "events.jsonl").write_bytes(b"".join(_lines(recorded)[:-2]))
    assert ("events.jsonl", None, "log is not sealed") in findings(no_seal)

    screen = copy(recorded, tmp_path / "t")
    blob = (recorded / "screen.rfbrec").read_bytes()
    (screen / "screen.rfbrec").write_bytes(blob[:-7])
    problems = findings(screen)
    assert problems[0] == ("screen.rfbrec", None, f"truncated: {len(blob) - 7} of {len(blob)} bytes sealed")
    assert any("unreadable from byte" in p for _, _, p in problems)


def test_altered_and_missing_files_are_found(recorded: Path, tmp_path: Path) -> None:
    blob = bytearray((recorded / "screen.rfbrec").read_bytes())
    altered = copy(recorded, tmp_path / "a")
    blob[-3] ^= 0x01  # inside the end record's payload: still parses, but is not what was sealed
    (altered / "screen.rfbrec").write_bytes(bytes(blob))
    assert findings(altered) == [("screen.rfbrec", None, "altered: SHA-256 differs from the sealed one")]

    missing = copy(recorded, tmp_path / "m")
    (missing / "screen.rfbrec").unlink()
    (missing / "meta.json").unlink()
    (missing / "notes.txt").write_text("x")
    got = findings(missing)
    assert ("meta.json", None, "missing") in got and ("notes.txt", None, "unexpected file in a session folder") in got
    assert any(name == "screen.rfbrec" and problem.startswith("missing") for name, _, problem in got)

    meta = copy(recorded, tmp_path / "h")
    data = json.loads((meta / "meta.json").read_text())
    data["log_head"] = "0" * 64
    (meta / "meta.json").write_text(json.dumps(data))
    assert findings(meta) == [("meta.json", None, "field 'log_head' differs from the hash of the log's seal line")]


def test_sessions_root_and_missing_folders(recorded: Path, tmp_path: Path) -> None:
    one = copy(recorded, tmp_path)
    gone = str(tmp_path / "sessions" / "20260101T000000Z-deadbeef")
    checks = verify_path(tmp_path / "sessions", known_folders=[str(one), gone])
    assert [c.ok for c in checks] == [True, False]
    assert checks[1].findings[0].problem.startswith("missing: the gateway's session table")
    with pytest.raises(FileNotFoundError):
        verify_path(tmp_path / "nothing")


def test_audit_verify_cli_exit_codes(recorded: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    def in_process(*args: str) -> subprocess.CompletedProcess:  # the same main(argv); real runs above: exit 0, 1, 2
        from tests.cli_inprocess import run_cli

        return run_cli("audit", *args)

    trust = tmp_path / "trust.json"
    TrustStore().save(trust)
    good = copy(recorded, tmp_path / "g")
    # the standalone proxy has no key: its seals are unsigned, a finding unless accepted as such
    done = run("verify", str(good), "--trust", str(trust))
    assert done.returncode == 1 and "seal is not signed" in done.stdout
    done = run("verify", str(good), "--trust", str(trust), "--allow-unsigned")
    assert done.returncode == 0 and done.stdout.startswith("ok ") and "unsigned" in done.stdout
    bad = copy(recorded, tmp_path / "b")
    (bad / "events.jsonl").write_bytes(b"".join(_lines(recorded)[1:]))
    done = in_process("verify", str(tmp_path / "b" / "sessions"), "--json", "--trust", str(trust), "--allow-unsigned")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["sessions"] == 1 and report["findings"] == 1
    assert report["checks"][0]["findings"][0] == {
        "file": str(bad / "events.jsonl"), "line": 1,
        "problem": "1 line(s) removed before this line (its sequence number is 1, line 1 should hold 0)"}
    assert in_process("verify", str(tmp_path / "none"), "--trust", str(trust)).returncode == 2
    missing_trust = run("verify", str(good), "--trust", str(tmp_path / "no-trust.json"))
    assert missing_trust.returncode == 2 and "trust store missing" in missing_trust.stderr
    assert in_process("sessions", str(tmp_path / "g" / "sessions"), "--since", "yesterday").returncode == 2


def test_summary_counts_what_happened(recorded: Path) -> None:
    summary = summarize(recorded)
    assert (summary.keys, summary.keys_blocked, summary.cut_text_attempts, summary.clicks) == (2, 1, 2, 1)
    # keys: "a" and Ctrl (the N of Ctrl+N is blocked); the clipboard both ways
    assert summary.flagged and summary.sealed and summary.duration is not None and summary.duration > 0.3


def fake_session(root: Path, name: str, recipient: str, release: str, start: str, *events: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    log = EventLog(folder / "events.jsonl")
    log.write("connect", recipient=recipient, release=release)
    for event in events:
        log.write(event, down=True)
    head = log.close()
    (folder / "meta.json").write_text(json.dumps({"session": name, "recipient": recipient, "release": release,
                                                  "start": start, "end": start, "log_head": head}))


def test_filters(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    fake_session(root, "s1", "ann", "adult/aaa", "2026-11-01T10:00:00+00:00", "key")
    fake_session(root, "s2", "ann", "cup/bbb", "2026-11-05T10:00:00+00:00", "key_blocked")
    fake_session(root, "s3", "ben", "adult/ccc", "2026-11-09T10:00:00+00:00", "limit_hit")
    names = lambda **kw: [s.session for s in find_sessions(root, **kw)]  # noqa: E731
    assert names() == ["s1", "s2", "s3"]
    assert names(recipient="ann") == ["s1", "s2"]
    assert names(release="adult") == ["s1", "s3"] and names(release="cup/bbb") == ["s2"]
    assert names(since=datetime(2026, 11, 5, tzinfo=timezone.utc)) == ["s2", "s3"]
    assert names(until=datetime(2026, 11, 5, tzinfo=timezone.utc)) == ["s1"]
    assert names(flagged=True) == ["s2", "s3"]
    assert names(recipient="ann", flagged=True) == ["s2"]
    assert all(check.ok for check in verify_path(root))


def test_a_killed_sessions_log_is_sealed_as_recovered(recorded: Path, tmp_path: Path) -> None:
    """What a gateway does at start for the sessions its killed predecessor left open: an intact but unsealed log
    gets a disconnect and a seal marked recovered (with the recording as found, possibly cut mid-record), and then
    verifies as partial (this proxy signs no checkpoints: no line is proven, every line it found is an unverifiable
    tail); a damaged log is left exactly as found."""
    from proxy.audit.rfbdecode import Replay
    from proxy.recovery import seal_interrupted

    killed = copy(recorded, tmp_path / "k")
    lines = _lines(recorded)
    (killed / "events.jsonl").write_bytes(b"".join(lines[:-2]))  # no disconnect, no seal: the writer died
    blob = (recorded / "screen.rfbrec").read_bytes()
    (killed / "screen.rfbrec").write_bytes(blob[:-5])  # cut inside the last record
    assert not verify_session(killed).ok
    head = seal_interrupted(killed, "interrupted: the gateway stopped without ending it")
    assert head is not None
    check = verify_session(killed)
    assert not check.findings and check.partial and not check.ok, check.findings
    assert (check.verified_lines, check.unverified_lines) == (0, len(lines) - 2)
    assert verify_session(killed, allow_partial=True).ok
    seal = json.loads((killed / "events.jsonl").read_text().splitlines()[-1])
    assert seal["recovered"] is True and seal["recording"]["complete"] is False
    assert seal["checkpoint"] is None and seal["unverified_lines"] == len(lines) - 2
    meta = json.loads((killed / "meta.json").read_text())
    assert meta["log_head"] == head and meta["end_reason"].startswith("interrupted")
    assert list(Replay(killed / "screen.rfbrec").messages())  # the cut recording still replays

    damaged = copy(recorded, tmp_path / "d")
    (damaged / "events.jsonl").write_bytes(b"".join(lines[:3] + lines[4:-2]))
    before = (damaged / "events.jsonl").read_bytes()
    assert seal_interrupted(damaged, "interrupted") is None
    assert (damaged / "events.jsonl").read_bytes() == before
    assert seal_interrupted(recorded, "interrupted") is None  # sealed already: untouched


def test_a_session_killed_before_its_recording_reached_the_disk(recorded: Path, tmp_path: Path) -> None:
    from proxy.recovery import seal_interrupted

    killed = copy(recorded, tmp_path / "e")
    (killed / "events.jsonl").write_bytes(b"".join(_lines(recorded)[:3]))
    (killed / "screen.rfbrec").write_bytes(b"SAFESHARE")  # part of the magic line only
    assert seal_interrupted(killed, "interrupted") is not None
    assert verify_session(killed, allow_partial=True).ok
    (killed / "screen.rfbrec").write_bytes(b"XYZ")  # not a recording at all
    assert any("altered" in f.problem or "bytes" in f.problem for f in verify_session(killed).findings)
