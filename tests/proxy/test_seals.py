"""Signed and anchored session seals (issue 12, item 2 and items 16-18): real sessions through the real gateway in
front of a scripted VNC server, sealed with the site's gateway key and anchored in the site's SQLite database; then
the forgeries a writer of the folder (and of the database) would try, a killed gateway, key rotation, export."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from proxy.anchors import AnchorBook
from proxy.audit.sessions import find_sessions
from proxy.audit.verify import ANCHORED, SIGNED, verify_path, verify_session
from proxy.eventlog import GENESIS, KeySource, seal_message, verify_log
from proxy.recovery import seal_interrupted
from proxy.tokens import TokenStore
from safeshare.signing import SignatureError, SigningKey, TrustStore, ensure_key
from tests.cdp import wait_for
from tests.cli_inprocess import run_cli
from tests.proxy.rfbtools import FakeVncServer
from tests.proxy.test_gateway import running_gateway, ws_rfb_connect

REPO = Path(__file__).resolve().parents[2]
SECRET = b"CLIP" * 10
UPDATE = b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x02\x00\x01\x00\x00\x00\x00" + b"\x10\x20\x30\x00" * 2


class SiteFiles:
    """The parts of a site these tests need, at the paths deploy/site/folder.py uses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sessions = root / "sessions"
        self.key = root / "secrets" / "gateway" / "signing.key"
        self.trust_file = root / "trust.json"
        self.db_file = root / "db" / "safeshare.db"
        self.db = f"sqlite:///{self.db_file}"

    @classmethod
    def create(cls, root: Path) -> "SiteFiles":
        site = cls(root)
        site.key.parent.mkdir(parents=True)
        os.chmod(site.key.parent, 0o700)
        site.db_file.parent.mkdir(parents=True)
        ensure_key(site.key, site.trust_file, "gateway")
        return site

    def copy_to(self, root: Path) -> "SiteFiles":
        """A copy of this site at `root` that a test may tamper with (folders, database, keys); the database's rows
        name their folders by absolute path, so they are pointed at the copy."""
        shutil.copytree(self.root, root, symlinks=True)
        copy = SiteFiles(root)
        with sqlite3.connect(copy.db_file) as db:
            db.execute("UPDATE gateway_sessions SET folder = replace(folder, ?, ?)", (str(self.root), str(copy.root)))
        return copy

    def trust(self) -> TrustStore:
        return TrustStore.load(self.trust_file)

    def anchors(self) -> dict:
        book = AnchorBook(self.db)
        try:
            return book.all()
        finally:
            book.dispose()

    def check(self, path: Path | None = None, **kwargs):
        return verify_path(path or self.sessions, trust=self.trust(), **kwargs)


async def session_through(base: str, token: str, keys: int = 1) -> None:
    """One recipient session: clipboard, a typed key (and Ctrl+N, blocked), a click; the client then leaves."""
    async with aiohttp.ClientSession() as http:
        client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
        await client.request(False)
        await client.read_update()
        await client.cut_text(SECRET)
        for _ in range(keys):
            for sym, down in [(0x61, True), (0x61, False), (0xFFE3, True), (0x6E, True), (0x6E, False),
                              (0xFFE3, False)]:
                await client.key(sym, down)
        await client.pointer(1, 10, 10)
        await client.pointer(0, 10, 10)
        await asyncio.sleep(0.2)  # let the proxy log the input before the client leaves
        await stream.wait_closed()


def record_sessions(site: SiteFiles, count: int, gateway_name: str = "gw", between=None) -> list[Path]:
    """`count` sessions through one running gateway that signs with the site's key; `between(i)` runs after
    session i (for rotation). Returns the session folders, oldest first."""
    store = TokenStore(site.db)
    fake = FakeVncServer(script=b"\x03\x00\x00\x00" + len(SECRET).to_bytes(4, "big") + SECRET + UPDATE)
    issued = store.issue("ann", "127.0.0.1:1", release="adult/13abe27a1ced35db")

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(site.root, store, name=gateway_name, novnc_dir=None,
                                       signing_key=KeySource(site.key)) as (gateway, base):
                for index in range(count):
                    await session_through(base, issued.token)
                    await wait_for(lambda: len(gateway.ended) == index + 1, 10)
                    await wait_for(lambda: all(a.seal_hash for a in site.anchors().values()), 5)
                    if between is not None:
                        await asyncio.to_thread(between, index)
        finally:
            await fake.close()

    asyncio.run(run())
    store.dispose()
    return ordered(site)


def ordered(site: SiteFiles) -> list[Path]:
    """Session folders in the order they started (names sort by second, then by a random suffix)."""
    return sorted(site.sessions.iterdir(), key=lambda f: json.loads((f / "meta.json").read_text())["start"])


@pytest.fixture(scope="module")
def recorded_site(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    """A site with two sessions sealed by its gateway (the second chained to the first)."""
    site = SiteFiles.create(tmp_path_factory.mktemp("site") / "site")
    record_sessions(site, 2)
    return site


@pytest.fixture
def site(recorded_site: SiteFiles, tmp_path: Path) -> SiteFiles:
    """A copy of the recorded site that a test may tamper with (folders, database, keys)."""
    return recorded_site.copy_to(tmp_path / "site")


def lines_of(folder: Path) -> list[bytes]:
    return (folder / "events.jsonl").read_bytes().splitlines()


def forge(folder: Path, keep=lambda event: True, limit: int | None = None, key: SigningKey | None = None,
          steal_signature: bool = False) -> None:
    """What a writer of the folder does: drop events, re-chain, re-seal (unsigned, signed with their own key, or
    with the genuine seal's signature copied), and fix meta.json's head; the result is a well-formed log."""
    events = [json.loads(line) for line in lines_of(folder)]
    seal = events[-1]
    body = [event for event in events[:-1] if keep(event)][:None if limit is None else limit - 1]
    out, prev = [], GENESIS
    for index, event in enumerate(body):
        event = {**event, "seq": index, "prev": prev}
        line = json.dumps(event, separators=(",", ":")).encode()
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    new_seal = {k: v for k, v in seal.items() if k != "signature"}
    new_seal.update(seq=len(out), lines=len(out), prev=prev)
    if key is not None:
        new_seal["signature"] = key.sign(seal_message(new_seal))
    elif steal_signature:
        new_seal["signature"] = seal["signature"]
    line = json.dumps(new_seal, separators=(",", ":")).encode()
    out.append(line)
    (folder / "events.jsonl").write_bytes(b"\n".join(out) + b"\n")
    meta = json.loads((folder / "meta.json").read_text())
    meta["log_head"] = hashlib.sha256(line).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))
    assert verify_log(folder / "events.jsonl").ok  # a perfect chain: only the signature and the anchor can tell


def problems(checks, session: str) -> list[str]:
    return [f.problem for check in checks if check.session == session for f in check.findings]


def audit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def audit_in_process(*args: str) -> subprocess.CompletedProcess:
    """`safeshare audit ARGS` through the same main(argv) in this process (no interpreter start per call); each
    command keeps real runs here (`audit` above) for the process's exit codes, 0 and 1."""
    return run_cli("audit", *args)


# --- what an honest session looks like ----------------------------------------------------------------------------

def test_sealed_sessions_are_signed_anchored_and_chained(recorded_site: SiteFiles) -> None:
    site = recorded_site
    first, second = ordered(site)
    checks = site.check(anchors=site.anchors(), deleted={})
    assert [c.ok for c in checks] == [True, True], [c.findings for c in checks]
    assert {(c.signature, c.anchor) for c in checks} == {(SIGNED, ANCHORED)}
    assert {c.signed_by for c in checks} == {SigningKey.load(site.key).key_id}
    anchors = site.anchors()
    by_session = {check.session: check for check in checks}
    for folder in (first, second):
        check = by_session[folder.name]
        seal = json.loads(lines_of(folder)[-1])
        row = anchors[folder.name]
        assert (row.seal_hash, row.events) == (check.head, check.lines)
        assert row.recording_sha256 == seal["recording"]["sha256"]
        assert seal["session"] == folder.name and seal["gateway"] == "gw"
    assert json.loads(lines_of(first)[-1])["previous"] is None
    assert json.loads(lines_of(second)[-1])["previous"] == {"session": first.name,
                                                            "seal": by_session[first.name].head}
    assert anchors[second.name].previous_session == first.name
    # the release is stored as dataset/id, the form `audit sessions --release DATASET` matches
    assert [s.session for s in find_sessions(site.sessions, release="adult")] == [first.name, second.name]
    done = audit("verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"signed by {SigningKey.load(site.key).key_id}, anchor anchored" in done.stdout


# --- the forgeries of issue 12, item 2 ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["unsigned", "own key", "stolen signature"])
def test_rewritten_log_without_keys_and_cut_text_fails(site: SiteFiles, how: str) -> None:
    """Remove every key and cut-text event, re-chain, re-seal and fix meta.json: the chain is perfect, but the seal
    is not the gateway's, and the database anchored another log."""
    folder = ordered(site)[0]
    original = lines_of(folder)
    assert any(b'"event":"key"' in line for line in original) and any(b"cut_text" in line for line in original)
    forge(folder, keep=lambda e: e.get("event") not in ("key", "key_blocked", "cut_text_dropped"),
          key=SigningKey.generate(site.root / "mine.key") if how == "own key" else None,
          steal_signature=how == "stolen signature")
    expected = {"unsigned": "seal is not signed",
                "own key": "which the site does not trust for gateway",
                "stolen signature": "does not match (the signed content was changed)"}[how]
    without_db = problems(site.check(), folder.name)
    assert any(expected in p for p in without_db), without_db
    with_db = problems(site.check(anchors=site.anchors()), folder.name)
    assert any(expected in p for p in with_db)
    assert any(p.startswith("seal differs from the anchor") for p in with_db), with_db
    assert any(p.startswith("rewritten: this is not the line the gateway anchored") or "line(s) missing" in p
               for p in with_db)
    for extra in ([], ["--db", site.db]):
        done = audit_in_process("verify", str(site.sessions), "--trust", str(site.trust_file), *extra)
        assert done.returncode == 1 and f"FAILED   {folder.name}" in done.stdout, done.stdout


def test_log_cut_to_ten_lines_with_a_forged_seal_fails(site: SiteFiles) -> None:
    folder = ordered(site)[1]
    forge(folder, limit=10)
    assert len(lines_of(folder)) == 10
    got = problems(site.check(), folder.name)
    assert any("seal is not signed" in p for p in got)
    got = problems(site.check(anchors=site.anchors()), folder.name)
    row = site.anchors()[folder.name]
    assert any(p == f"{row.events - 10} line(s) missing: the gateway anchored {row.events} lines, the log has 10"
               for p in got), got
    assert audit("verify", str(folder), "--trust", str(site.trust_file), "--db", site.db).returncode == 1


def test_a_writer_of_the_folder_and_the_database_still_cannot_sign(site: SiteFiles) -> None:
    """Rewrite the log and then the anchor to match: the database agrees, the signature still does not."""
    folder = ordered(site)[0]
    forge(folder, keep=lambda e: e.get("event") != "key")
    check = verify_session(folder)
    with sqlite3.connect(site.db_file) as db:
        db.execute("UPDATE gateway_sessions SET seal_hash = ?, events = ?, anchor_head = ?, anchor_lines = ? "
                   "WHERE id = ?", (check.head, check.lines, check.head, check.lines, folder.name))
    second = ordered(site)[1]
    got = problems(site.check(anchors=site.anchors()), folder.name)
    assert got == ["seal is not signed (sealed before signing, by a proxy without a key, or its signature was "
                   "removed): it proves nothing against a writer of the folder",
                   # and the next session's signed seal names the genuine seal of this one
                   f"not the session sealed before {second.name}: its signed seal names {folder.name} with seal "
                   f"{json.loads(lines_of(second)[-1])['previous']['seal']}"]


def test_an_altered_seal_line_is_reported_at_the_seal(site: SiteFiles) -> None:
    """The seal has no line after it to break: its signature (and the anchor) find a change, at its line."""
    folder = ordered(site)[0]
    lines = lines_of(folder)
    seal = json.loads(lines[-1])
    seal["recording"]["sha256"] = "0" * 64  # vouch for another recording
    (folder / "events.jsonl").write_bytes(b"\n".join(lines[:-1] + [json.dumps(seal).encode()]) + b"\n")
    found = [(f.line, f.problem) for f in site.check(folder)[0].findings]
    assert (len(lines), "seal signature: signature by key "
            f"{SigningKey.load(site.key).key_id} does not match (the signed content was changed)") in found


# --- anchors ------------------------------------------------------------------------------------------------------

def test_missing_anchors_are_reported(site: SiteFiles) -> None:
    first, second = ordered(site)
    with sqlite3.connect(site.db_file) as db:
        db.execute("DELETE FROM gateway_sessions WHERE id = ?", (first.name,))
        db.execute("UPDATE gateway_sessions SET seal_hash = NULL WHERE id = ?", (second.name,))
    checks = site.check(anchors=site.anchors())
    assert problems(checks, first.name) == ["anchor missing: the gateways' session table has no row for this "
                                            "session"]
    assert problems(checks, second.name) == ["anchor missing: the session ended but the gateways' session table "
                                             "holds no seal hash for it"]
    assert all(c.ok for c in site.check())  # without the database only the signature speaks: still genuine
    done = audit_in_process("verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db, "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["findings"] == 2


def test_deleting_a_whole_session_and_its_row_is_found_from_the_next_seal(site: SiteFiles) -> None:
    first, second = ordered(site)
    shutil.rmtree(first)
    with sqlite3.connect(site.db_file) as db:
        db.execute("DELETE FROM gateway_sessions WHERE id = ?", (first.name,))
    checks = site.check(anchors=site.anchors())
    assert [c.ok for c in checks if c.session == second.name] == [True]
    assert problems(checks, first.name) == [f"missing: {second.name}'s signed seal names it as the session sealed "
                                            f"before, and no retention deletion is recorded"]
    # deleted by retention (a `session-deleted` audit event): not missing
    checks = site.check(anchors=site.anchors(), deleted={first.name: "x"})
    assert all(c.ok for c in checks) and [c.session for c in checks] == [second.name]


def test_a_killed_gateway_leaves_an_anchor_that_recovery_must_extend(tmp_path: Path) -> None:
    """`safeshare gateway` killed with SIGKILL mid-session: its row holds the head it anchored while the session
    ran. A log cut below that head is not sealed at recovery and is reported; the intact log is sealed (signed) by
    the restarted gateway and verifies against the anchor."""
    site = SiteFiles.create(tmp_path / "site")
    store = TokenStore(site.db)
    fake = FakeVncServer()
    issued = store.issue("ann", "127.0.0.1:1", release="adult/13abe27a1ced35db")
    book = AnchorBook(site.db)

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        gateway = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "safeshare.cli", "gateway", "--listen", "127.0.0.1:0", "--sessions",
            str(site.sessions), "--db", site.db, "--signing-key", str(site.key), "--anchor-interval", "0.1",
            "--name", "gw", "--novnc", str(tmp_path / "no-novnc"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            async with asyncio.timeout(30):
                line = (await gateway.stdout.readline()).decode()
                assert line.startswith("listening on http://127.0.0.1:"), line
                base = line.split()[-1].rstrip("/")
                async with aiohttp.ClientSession() as http:
                    client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={issued.token}")
                    for sym in (0x61, 0x62, 0x63):
                        await client.key(sym, True)
                        await client.key(sym, False)
                    await wait_for(lambda: any((a.anchor_lines or 0) >= 6 for a in book.all().values()), 10)
                    gateway.send_signal(signal.SIGKILL)
                    await gateway.wait()
                    await stream.wait_closed()
        finally:
            if gateway.returncode is None:
                gateway.kill()
                await gateway.wait()
            await fake.close()

    asyncio.run(run())
    (folder,) = site.sessions.iterdir()
    (anchor,) = book.all().values()
    assert anchor.seal_hash is None and not anchor.ended and anchor.anchor_lines >= 6
    assert not verify_log(folder / "events.jsonl").sealed

    # a writer cuts the unsealed log below the anchor while the gateway is down: recovery must not sign it
    cut = tmp_path / "cut" / folder.name
    shutil.copytree(folder, cut)
    (cut / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines_of(cut)[:anchor.anchor_lines - 2]))
    before = (cut / "events.jsonl").read_bytes()
    assert seal_interrupted(cut, "interrupted", anchor=(anchor.anchor_head, anchor.anchor_lines)) is None
    assert (cut / "events.jsonl").read_bytes() == before
    got = [f.problem for f in verify_session(cut, site.trust(), anchor).findings]
    assert "2 line(s) missing: the gateway anchored %d lines, the log has %d" % (
        anchor.anchor_lines, anchor.anchor_lines - 2) in got

    # the gateway starts again: the intact log extends the anchor, is sealed signed, and the seal is anchored
    async def restart() -> None:
        async with running_gateway(site.root, store, name="gw", novnc_dir=None, signing_key=KeySource(site.key)):
            pass

    asyncio.run(restart())
    (check,) = site.check(anchors=site.anchors())
    # proven up to the last checkpoint the killed gateway signed: a partial session, without findings
    assert not check.findings and check.partial and not check.ok, check.findings
    assert check.recovered and check.checkpoints >= 2 and check.verified_lines >= 2
    assert (check.signature, check.anchor) == (SIGNED, ANCHORED)
    seal = json.loads(lines_of(folder)[-1])
    assert seal["recovered"] is True and seal["session"] == folder.name
    assert seal["checkpoint"]["line"] == check.verified_lines and seal["unverified_lines"] == check.unverified_lines
    (accepted,) = site.check(anchors=site.anchors(), allow_partial=True)
    assert accepted.ok and accepted.partial
    assert site.anchors()[folder.name].seal_hash == check.head
    book.dispose()
    store.dispose()


def test_old_databases_get_the_anchor_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE gateway_sessions (id VARCHAR(64) PRIMARY KEY, gateway VARCHAR(200), token_id "
                   "INTEGER, recipient VARCHAR(200), target_name VARCHAR(200), release VARCHAR(200), folder "
                   "VARCHAR(1000), started_at DATETIME, ended_at DATETIME, end_reason VARCHAR(500))")
        db.execute("INSERT INTO gateway_sessions (id, gateway, token_id, recipient, target_name, folder) VALUES "
                   "('s1', 'gw', 1, 'ann', 't', '/x/s1')")
    for _ in range(2):  # idempotent
        book = AnchorBook(f"sqlite:///{path}")
        book.sealed("s1", "a" * 64, 12, "b" * 64, None)
        book.dispose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT seal_hash, events, recording_sha256 FROM gateway_sessions").fetchall() == [
            ("a" * 64, 12, "b" * 64)]


# --- keys ---------------------------------------------------------------------------------------------------------

def test_rotation_keeps_old_sessions_valid_and_signs_new_ones_with_the_new_key(tmp_path: Path) -> None:
    """`safeshare custodian key rotate --purpose gateway` while the gateway runs: the session sealed before still
    verifies (its key is retired, not removed), the next one is signed with the new key without a restart."""
    site = SiteFiles.create(tmp_path / "site")
    old_key = SigningKey.load(site.key)
    old_id = old_key.key_id
    rotated: list[subprocess.CompletedProcess] = []

    def rotate(index: int) -> None:
        if index == 0:
            rotated.append(subprocess.run(
                [sys.executable, "-m", "safeshare.cli", "custodian", "key", "rotate", "--purpose", "gateway",
                 "--site", str(site.root), "--json"], cwd=REPO, capture_output=True, text=True, timeout=60))

    first, second = record_sessions(site, 2, between=rotate)
    assert rotated[0].returncode == 0, rotated[0].stderr
    report = json.loads(rotated[0].stdout)
    new_id = SigningKey.load(site.key).key_id
    assert report["retired"] == [old_id] and report["key_id"] == new_id != old_id
    assert oct(site.key.stat().st_mode & 0o777) == "0o600"
    checks = {c.session: c for c in site.check(anchors=site.anchors())}
    assert all(c.ok for c in checks.values()), [c.findings for c in checks.values()]
    assert (checks[first.name].signed_by, checks[second.name].signed_by) == (old_id, new_id)
    trust = site.trust()
    assert [k.key_id for k in trust.trusted("gateway")] == [old_id, new_id]
    assert trust.trusted("gateway")[0].retired is not None and trust.current("gateway").key_id == new_id
    # what the old key signs after its retirement (someone kept a copy of it) does not verify
    late = json.loads(lines_of(first)[-1])
    late["signature"] = old_key.sign(seal_message(late), signed_at="2999-01-01T00:00:00+00:00")
    with pytest.raises(SignatureError, match="after it was retired"):
        trust.verify("gateway", seal_message(late), late["signature"])


def test_gateway_told_to_sign_without_a_usable_key_does_not_start(tmp_path: Path) -> None:
    def gateway(key: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "safeshare.cli", "gateway", "--listen", "127.0.0.1:0",
                               "--sessions", str(tmp_path / "sessions"), "--db", f"sqlite:///{tmp_path / 'g.db'}",
                               "--signing-key", str(key)], cwd=REPO, capture_output=True, text=True, timeout=60)

    missing = gateway(tmp_path / "nothing.key")
    assert missing.returncode == 2 and "nothing.key: signing key not readable" in missing.stderr
    loose = tmp_path / "loose.key"
    SigningKey.generate(loose)
    os.chmod(loose, 0o644)
    refused = gateway(loose)
    assert refused.returncode == 2 and "readable or writable by others" in refused.stderr
    assert not (tmp_path / "sessions").exists()


# --- audit export (item 16) ---------------------------------------------------------------------------------------

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is installed by scripts/setup.sh")


def export_events(site: SiteFiles) -> list[dict]:
    from deploy.records import Records

    records = Records(site.db)
    try:
        return [{"outcome": e.outcome, **e.detail} for e in records.events(action="session-exported")]
    finally:
        records.dispose()


@needs_ffmpeg
def test_export_verifies_first(site: SiteFiles, tmp_path: Path) -> None:
    first, second = ordered(site)
    out = tmp_path / "good.mp4"
    done = audit("export", str(first), "--site", str(site.root), "--out", str(out))
    assert done.returncode == 0 and out.is_file(), done.stderr
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json",
                            str(out)], capture_output=True, text=True, check=True)
    assert json.loads(probe.stdout)["format"]["tags"]["comment"].startswith(f"safeshare: verified session "
                                                                            f"{first.name}")

    blob = (first / "screen.rfbrec").read_bytes()
    (first / "screen.rfbrec").write_bytes(blob[:-100])  # a recording cut by 100 bytes
    refused = audit_in_process("export", str(first), "--site", str(site.root), "--out", str(tmp_path / "cut.mp4"))
    assert refused.returncode == 1 and not (tmp_path / "cut.mp4").exists()
    assert f"truncated: {len(blob) - 100} of {len(blob)} bytes sealed" in refused.stderr

    lines = lines_of(second)
    lines[5] = lines[5].replace(b'"t":', b'"t": ', 1)  # an altered line
    (second / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    refused = audit("export", str(second), "--site", str(site.root), "--out", str(tmp_path / "altered.mp4"))
    assert refused.returncode == 1 and not (tmp_path / "altered.mp4").exists()
    assert "events.jsonl:6: altered: line 7 chains to a different line than this one" in refused.stderr

    forced = audit_in_process("export", str(second), "--site", str(site.root), "--out", str(tmp_path / "forced.mp4"),
                              "--force")
    assert forced.returncode == 0 and "UNVERIFIED" in forced.stdout, forced.stderr
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json",
                            str(tmp_path / "forced.mp4")], capture_output=True, text=True, check=True)
    assert json.loads(probe.stdout)["format"]["tags"]["comment"].startswith("safeshare: UNVERIFIED session")
    events = export_events(site)
    assert [(e["outcome"], e["session"], e["verified"]) for e in events] == [
        ("ok", first.name, True), ("refused", first.name, False), ("refused", second.name, False),
        ("unverified", second.name, False)]


# --- item 18: one release form ------------------------------------------------------------------------------------

def test_safeshare_up_names_releases_as_dataset_slash_id(tmp_path: Path) -> None:
    """`safeshare up` issues its token (and so its sessions) with the release as `dataset/id`, as provisioning
    does, so that `audit sessions --release adult` finds both."""
    from deploy.local import release_ref
    from tests.proxy.test_audit import fake_session

    bundle = tmp_path / "home" / "releases" / "adult" / "13abe27a1ced35db"
    assert release_ref(bundle) == "adult/13abe27a1ced35db"
    root = tmp_path / "sessions"
    fake_session(root, "s-up", "demo", release_ref(bundle), "2026-11-01T10:00:00+00:00", "key")
    fake_session(root, "s-provisioned", "ann", "adult/aaaa", "2026-11-02T10:00:00+00:00", "key")
    assert [s.session for s in find_sessions(root, release="adult")] == ["s-up", "s-provisioned"]


def test_meta_json_must_agree_with_the_log(site: SiteFiles) -> None:
    """`audit sessions` filters on meta.json: a recipient changed there (to hide a session) is a finding."""
    folder = ordered(site)[0]
    meta = json.loads((folder / "meta.json").read_text())
    meta["recipient"] = "someone-else"
    (folder / "meta.json").write_text(json.dumps(meta))
    assert problems(site.check(folder), folder.name) == ["field 'recipient' is 'someone-else', the log's connect "
                                                         "event says 'ann'"]


def test_the_custodian_services_verification_checks_signature_and_anchor(site: SiteFiles) -> None:
    """`GET /audit/sessions/{id}/verify` and the player's `verified` use the site's trust store and database."""
    from deploy.audit.cli import verify_site_session
    from deploy.site.folder import Site

    first, second = ordered(site)
    assert verify_site_session(Site(site.root), first).ok
    forge(first, keep=lambda e: e.get("event") != "key", steal_signature=True)
    got = [f.problem for f in verify_site_session(Site(site.root), first).findings]
    assert any("does not match" in p for p in got) and any(p.startswith("seal differs from the anchor") for p in got)


def test_sessions_deleted_by_retention_are_not_missing(site: SiteFiles, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    """Retention deletes the folder and records `session-deleted` (with the seal) in the site's audit log; the row
    and the next session's seal still name it, and `audit verify --db` reads the audit log to tell the two apart.
    The event must name that seal's head and be dated after the retention period (issue 24, item 4): here a year
    on, and checked then."""
    from datetime import datetime, timedelta, timezone

    import deploy.audit.sequence
    from deploy.records import Records
    from safeshare.cli import main

    first, second = ordered(site)
    head = json.loads((first / "meta.json").read_text())["log_head"]
    shutil.rmtree(first)
    args = ("verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db, "--json")
    done = audit_in_process(*args)
    assert done.returncode == 1
    assert {f["problem"] for c in json.loads(done.stdout)["checks"] for f in c["findings"]} == {
        "missing: the gateway's session table records this session"}
    later = datetime.now(timezone.utc) + timedelta(days=366)  # the site's default retention is 365 days
    records = Records(site.db, clock=lambda: later)
    records.audit("system:retention", "session-deleted", "ok", "ann", session=first.name, log_head=head)
    records.dispose()
    monkeypatch.setattr(deploy.audit.sequence, "now", lambda: later)
    assert main(["audit", *args]) == 0, capsys.readouterr().out
