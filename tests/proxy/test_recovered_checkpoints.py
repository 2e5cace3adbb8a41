"""Issue 24, item 2: a recovering gateway must not vouch for lines it cannot prove it wrote.

The attack, end to end: a real session through the real gateway (signing with the site's key, anchoring in the
site's database); then a writer of the sessions folder and of the database rewrites its `events.jsonl` (events
dropped, chain recomputed, seal removed), clears the seal columns of its row and restarts the gateway, which seals
the log as `recovered`. Before checkpoints, `audit verify` passed with and without `--db`. Now the gateway signs
checkpoints into the log while the session runs, a rewrite before the last one breaks its signature, and the
recovered seal vouches only up to the last checkpoint its key signed: `audit verify` fails, or reports the lines
after that checkpoint as an unverifiable tail (PARTIAL, exit 1); never a pass.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from proxy.eventlog import CHECKPOINT_INTERVAL, CONTROL_EVENTS, GENESIS, checkpoint_message, verify_log
from proxy.tokens import TokenStore
from safeshare.signing import SigningKey
from tests.cdp import wait_for
from tests.proxy.rfbtools import FakeVncServer
from tests.proxy.test_gateway import running_gateway, ws_rfb_connect
from tests.proxy.test_seals import UPDATE, SiteFiles, audit, lines_of
from proxy.eventlog import KeySource

PAUSE = CHECKPOINT_INTERVAL + 0.8  # between the typing and the end: a periodic checkpoint falls after the keys


async def typing_session(base: str, token: str) -> None:
    """A researcher types 'abc', reads for a while, types 'd', leaves."""
    async with aiohttp.ClientSession() as http:
        client, stream = await ws_rfb_connect(http, f"{base}/websockify?token={token}")
        await client.request(False)
        await client.read_update()
        for sym in (0x61, 0x62, 0x63):
            await client.key(sym, True)
            await client.key(sym, False)
        await asyncio.sleep(PAUSE)
        await client.key(0x64, True)
        await client.key(0x64, False)
        await asyncio.sleep(0.3)
        await stream.wait_closed()


def gateway_run(site: SiteFiles, body=None) -> None:
    """The site's gateway (name gw, the site's key) started (recovering what a previous run left open), `body(base)`
    run against it, and stopped."""
    store = TokenStore(site.db)
    fake = FakeVncServer(script=UPDATE)
    issued = store.issue("ann", "127.0.0.1:1", release="adult/13abe27a1ced35db")

    async def run() -> None:
        port = await fake.start()
        store.ensure_target(f"127.0.0.1:{port}", name="127.0.0.1:1")
        try:
            async with running_gateway(site.root, store, name="gw", novnc_dir=None,
                                       signing_key=KeySource(site.key)) as (gateway, base):
                if body is not None:
                    await typing_session(base, issued.token)
                    await wait_for(lambda: len(gateway.ended) == 1, 10)
                    await wait_for(lambda: all(a.seal_hash for a in site.anchors().values()), 5)
        finally:
            await fake.close()

    asyncio.run(run())
    store.dispose()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    site = SiteFiles.create(tmp_path_factory.mktemp("checkpoints") / "site")
    gateway_run(site, body=True)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    return recorded.copy_to(tmp_path / "site")


def events_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in lines_of(folder)]


def only_session(site: SiteFiles) -> Path:
    (folder,) = site.sessions.iterdir()
    return folder


# --- what the gateway writes ----------------------------------------------------------------------------------------

def test_the_gateway_signs_checkpoints_at_control_events_and_every_few_seconds(recorded: SiteFiles) -> None:
    folder = only_session(recorded)
    events = events_of(folder)
    kinds = [e["event"] for e in events]
    points = [i for i, kind in enumerate(kinds) if kind == "checkpoint"]
    # one after each control event (connect, upstream_ready, client_ready) and one while the researcher read
    for index, kind in enumerate(kinds[:-1]):
        if kind in CONTROL_EVENTS:
            assert kinds[index + 1] == "checkpoint", kinds
    keys = [i for i, kind in enumerate(kinds) if kind == "key"]
    assert any(keys[2] < i < keys[-1] for i in points), kinds  # periodic: between 'c' and 'd'
    assert not any(kinds[i - 1] == "key" and kinds[i + 1] == "key" for i in points if i + 1 < len(kinds)
                   and keys[0] < i < keys[2]), "a checkpoint per input event"
    assert len(points) <= 8, kinds
    trust = recorded.trust()
    key_id = SigningKey.load(recorded.key).key_id
    hashes = [hashlib.sha256(line).hexdigest() for line in lines_of(folder)]
    for index in points:
        point = events[index]
        assert point["lines"] == index and point["session"] == folder.name
        assert point["prev"] == (hashes[index - 1] if index else GENESIS)
        assert trust.verify("gateway", checkpoint_message(point), point["signature"]).key_id == key_id
    (check,) = recorded.check(anchors=recorded.anchors())
    assert check.ok and not check.partial, check.findings
    assert (check.checkpoints, check.verified_lines, check.unverified_lines) == (len(points), check.lines, 0)


# --- the attack -----------------------------------------------------------------------------------------------------

def rewrite(folder: Path, drop) -> None:
    """A writer of the folder: events dropped, the chain recomputed, no seal (meta.json's head dropped too)."""
    events = events_of(folder)[:-1]
    out, prev = [], GENESIS
    for event in (e for e in events if not drop(e)):
        event = {**event, "seq": len(out), "prev": prev}
        if event["event"] == "checkpoint":
            event["lines"] = len(out)  # counts right; only the signature can tell
        line = json.dumps(event, separators=(",", ":")).encode()
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    (folder / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in out))
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(log_head=None, end=None, end_reason=None)
    (folder / "meta.json").write_text(json.dumps(meta))
    result = verify_log(folder / "events.jsonl", require_seal=False)
    assert result.ok and not result.sealed


def clear_row(site: SiteFiles, session: str) -> None:
    """A writer of the database: the row as a gateway killed mid-session leaves it, without any anchor."""
    with sqlite3.connect(site.db_file) as db:
        db.execute("UPDATE gateway_sessions SET ended_at = NULL, end_reason = NULL, seal_hash = NULL, events = NULL, "
                   "recording_sha256 = NULL, anchor_head = NULL, anchor_lines = NULL, anchored_at = NULL, "
                   "previous_session = NULL WHERE id = ?", (session,))


@pytest.mark.parametrize("how", ["checkpoints kept", "later checkpoints dropped", "every checkpoint dropped"])
def test_a_rewritten_log_recovered_by_the_restarted_gateway_never_passes(site: SiteFiles, how: str) -> None:
    folder = only_session(site)
    original = events_of(folder)
    first_key = next(i for i, e in enumerate(original) if e["event"] == "key")
    proven_before = max(i for i, e in enumerate(original) if e["event"] == "checkpoint" and i < first_key) + 1

    def drop(event: dict) -> bool:
        if event["event"] == "key":
            return True
        if event["event"] == "checkpoint":
            return how == "every checkpoint dropped" or (how == "later checkpoints dropped" and
                                                         event["seq"] > first_key)
        return False

    rewrite(folder, drop)
    clear_row(site, folder.name)
    gateway_run(site)  # restarts: closes the row and seals the log as recovered, signed with its key

    seal = events_of(folder)[-1]
    assert seal["event"] == "seal" and seal["recovered"] is True
    expected_line = 0 if how == "every checkpoint dropped" else proven_before
    assert (seal["checkpoint"] or {}).get("line", 0) == expected_line  # it vouches for nothing after that
    assert site.anchors()[folder.name].seal_hash is not None

    for anchors in (None, site.anchors()):
        (check,) = site.check(anchors=anchors) if anchors is not None else site.check()
        assert not check.ok
        if how == "checkpoints kept":  # the rewrite is before signed checkpoints: their signatures fail
            assert any(f.problem.startswith("checkpoint signature:") and "does not match" in f.problem
                       for f in check.findings), check.findings
        if how == "every checkpoint dropped":  # a signing gateway's log left with none has lost them: a finding
            assert any("no signed checkpoint is left" in f.problem for f in check.findings), check.findings
        if how != "checkpoints kept":  # what is left unproven is reported as the tail, with its size
            assert check.partial and check.verified_lines == expected_line, check.as_dict()
            assert check.unverified_lines == len(lines_of(folder)) - 2 - expected_line > 0
            assert "unverifiable tail" in check.partial_note
    for extra in ([], ["--db", site.db]):
        done = audit("verify", str(site.sessions), "--trust", str(site.trust_file), *extra)
        assert done.returncode == 1, done.stdout + done.stderr
        if how in ("checkpoints kept", "every checkpoint dropped"):
            assert f"FAILED   {folder.name}" in done.stdout, done.stdout
        else:
            assert f"PARTIAL  {folder.name}" in done.stdout and "unverifiable" in done.stdout, done.stdout
        assert "0 ok" in done.stdout
    listed = audit("sessions", str(site.sessions), "--json")
    (summary,) = json.loads(listed.stdout)
    assert summary["recovered"] is True and summary["unverified_lines"] == seal["unverified_lines"]
    assert "recovered:" in audit("sessions", str(site.sessions)).stdout


def test_a_gateway_cannot_be_made_to_vouch_beyond_its_checkpoints_by_a_forged_one(site: SiteFiles) -> None:
    """A writer adds a checkpoint of their own after rewriting the tail: the gateway, which checks the checkpoints
    against its own key, vouches only up to its last genuine one, and verify reports the forged one."""
    folder = only_session(site)
    original = events_of(folder)
    first_key = next(i for i, e in enumerate(original) if e["event"] == "key")
    rewrite(folder, lambda e: e["event"] == "key" or (e["event"] == "checkpoint" and e["seq"] > first_key))
    lines = lines_of(folder)
    mine = SigningKey.generate(site.root / "mine.key")
    point = {"seq": len(lines), "t": 0.0, "event": "checkpoint", "session": folder.name, "lines": len(lines),
             "prev": hashlib.sha256(lines[-1]).hexdigest()}
    point["signature"] = mine.sign(checkpoint_message(point))
    (folder / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines)
                                          + json.dumps(point, separators=(",", ":")).encode() + b"\n")
    clear_row(site, folder.name)
    gateway_run(site)
    seal = events_of(folder)[-1]
    assert seal["recovered"] is True and seal["checkpoint"]["line"] < first_key
    (check,) = site.check(anchors=site.anchors())
    assert not check.ok and check.verified_lines == seal["checkpoint"]["line"]
    assert any("checkpoint signature" in f.problem for f in check.findings), check.findings


def test_checkpoints_vouch_for_the_recording_on_disk(recorded: SiteFiles) -> None:
    """Each checkpoint names the size and SHA-256 of the start of the recording that had reached the disk."""
    folder = only_session(recorded)
    blob = (folder / "screen.rfbrec").read_bytes()
    points = [e for e in events_of(folder) if e["event"] == "checkpoint"]
    sizes = [p["recording"]["bytes"] for p in points]
    assert sizes == sorted(sizes) and sizes[-1] > 0, sizes
    for point in points:
        size = point["recording"]["bytes"]
        assert hashlib.sha256(blob[:size]).hexdigest() == point["recording"]["sha256"]


def test_a_recording_altered_before_recovery_is_found_within_the_checkpointed_bytes(site: SiteFiles) -> None:
    """The log kept as the killed gateway left it (no seal), the recording changed inside the start its last
    checkpoint vouches for, the row cleared, the gateway restarted: the recovered seal hashes the altered file as
    found, but the checkpoint's hash finds the change."""
    folder = only_session(site)
    rewrite(folder, lambda e: False)  # only the seal goes: a log as a killed gateway leaves it
    last = [e for e in events_of(folder) if e["event"] == "checkpoint"][-1]
    size = last["recording"]["bytes"]
    blob = bytearray((folder / "screen.rfbrec").read_bytes())
    blob[size - 1] ^= 0xFF
    (folder / "screen.rfbrec").write_bytes(bytes(blob))
    clear_row(site, folder.name)
    gateway_run(site)
    assert events_of(folder)[-1]["recovered"] is True
    for anchors in (None, site.anchors()):
        (check,) = site.check(anchors=anchors) if anchors is not None else site.check()
        assert [f.problem for f in check.findings] == [
            f"altered within its first {size} bytes: the gateway's signed checkpoint at line {last['seq'] + 1} "
            f"vouches for its first {size} bytes"], check.findings
    assert events_of(folder)[-1]["checkpoint"]["line"] == last["seq"] + 1


def test_an_intact_log_of_a_killed_gateway_is_partial_with_its_recording_start_proven(site: SiteFiles) -> None:
    """Nothing altered (the gateway was simply killed after its last checkpoint): no finding, PARTIAL, the lines
    and the start of the recording the checkpoint vouches for are proven."""
    folder = only_session(site)
    rewrite(folder, lambda e: False)
    last = [e for e in events_of(folder) if e["event"] == "checkpoint"][-1]
    clear_row(site, folder.name)
    gateway_run(site)
    (check,) = site.check(anchors=site.anchors())
    assert not check.findings and check.partial, check.findings
    assert check.verified_lines == last["seq"] + 1
    assert f"the recording's first {last['recording']['bytes']} bytes are proven" in check.partial_note
