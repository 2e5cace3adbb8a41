"""Adversarial review of issue 24's signed in-log checkpoints and recovered seals (items 2 and 9), as a writer of
the sessions folder and the site's database (never the gateway's key or trust.json). See also
tests/test_adversarial_round2.py for the releases side.

Variants the helpers' tests already hold (tests/proxy/test_recovered_checkpoints.py, test_sealed_meta.py) and that
were tried here without a finding: a checkpoint replayed from another session (its `session` is signed), moved or
duplicated within its own log (its `lines` and `prev` are signed), a recovered seal claiming more (the gateway checks
checkpoints with its own key; the seal's `checkpoint` is signed), two logs spliced (the chain and the session id),
any meta.json field edited or added (every field is compared with the seal's signed metadata)."""
from __future__ import annotations

import json

import pytest

from tests.proxy.test_recovered_checkpoints import (clear_row, events_of, gateway_run, only_session,  # noqa: F401
                                                    recorded, rewrite, site)
from tests.proxy.test_seals import SiteFiles, audit

FORGED_RECIPIENT = "someone-else"
FORGED_START = "2020-01-01T00:00:00+00:00"


def test_a_recovered_log_stripped_of_its_checkpoints_cannot_have_forged_metadata_accepted(site: SiteFiles) -> None:
    """A writer of the sessions folder and the database drops every checkpoint of a crashed session's log, rewrites
    its connect line (recipient, start), re-chains it, clears the row's anchors and restarts the gateway, which
    seals it as recovered, signing the forged metadata. A gateway that signs checkpoints writes one right after the
    connect line, so such a log has lost them: `audit verify` reports a finding even with --allow-partial, and the
    sessions list takes nothing of it for signed."""
    folder = only_session(site)

    def forge(event: dict) -> bool:
        if event["event"] == "connect":
            event["recipient"] = FORGED_RECIPIENT
            event["meta"] = {**event["meta"], "recipient": FORGED_RECIPIENT, "start": FORGED_START}
        return event["event"] == "checkpoint"

    rewrite(folder, forge)
    clear_row(site, folder.name)
    gateway_run(site)   # the restarted gateway seals it as recovered, signing the connect line's metadata
    seal = events_of(folder)[-1]
    assert seal["recovered"] is True and seal["checkpoint"] is None
    assert seal["meta"]["recipient"] == FORGED_RECIPIENT   # what the attack achieved at the gateway

    done = audit("verify", str(site.sessions), "--trust", str(site.trust_file), "--db", site.db, "--allow-partial")
    assert done.returncode == 1, "a log stripped of its checkpoints passed: " + done.stdout
    listed = json.loads(audit("sessions", str(site.sessions), "--json").stdout)
    assert listed[0].get("recipient") != FORGED_RECIPIENT


# --- the player's hash-keyed cache (proxy/audit/player.py) ------------------------------------------------------------

def test_the_player_never_shows_a_forged_log_or_meta_as_verified(tmp_path) -> None:
    """Item 3's attack on the log instead of the recording. The player's index (key log, markers, pointer track,
    recipient, release, start) is built from events.jsonl and meta.json as read when it is prepared, but was cached
    under the recording's hash alone. A writer of the sessions folder swaps in a log with a forged key event and a
    meta.json naming another recipient, lets the background preparation run, and puts the genuine files back: the
    player then showed the forged key log and recipient with `verified: true` (the session verifies, the recording
    hash is the sealed one). Now the index records the head of the log it read, is rebuilt when the log is not that
    one, takes recipient, release and start from the seal's signed metadata in that same read, and is verified only
    when that head is the verified seal's."""
    from deploy.audit.cli import verify_site_session
    from deploy.site.folder import Site
    from proxy.audit.evidence import judge
    from proxy.audit.player import prepare, prepare_ended
    from tests.proxy.test_seals import ordered, record_sessions

    site = SiteFiles.create(tmp_path / "site")
    record_sessions(site, 1)
    (folder,) = ordered(site)
    events, meta = folder / "events.jsonl", folder / "meta.json"
    genuine_events, genuine_meta = events.read_bytes(), meta.read_bytes()
    genuine_recipient = json.loads(genuine_meta)["recipient"]
    lines = genuine_events.splitlines()
    last_t = json.loads(lines[-1])["t"]
    forged_key = json.dumps({"seq": 0, "t": last_t - 0.5, "event": "key", "keysym": 0x78, "down": True,
                             "prev": "0" * 64}).encode()
    events.write_bytes(b"\n".join([*lines[:-1], forged_key, lines[-1]]) + b"\n")
    meta.write_text(json.dumps({**json.loads(genuine_meta), "recipient": "mallory"}))
    cache = tmp_path / "cache"
    assert prepare_ended(site.sessions, cache) == [folder.name]   # the service's background preparation
    events.write_bytes(genuine_events)
    meta.write_bytes(genuine_meta)

    check = verify_site_session(Site(site.root), folder)
    assert check.ok, check.findings
    player = prepare(folder, cache)
    shown = judge(folder, check, player.sha256, player.log_head)
    assert shown.verified
    assert player.index["recipient"] == genuine_recipient
    assert not any(entry.get("label") == "x" for entry in player.index["keys"]), player.index["keys"]
    clean = prepare(folder, tmp_path / "clean")
    assert player.index["keys"] == clean.index["keys"] and player.index["markers"] == clean.index["markers"]

    # the other order: the genuine log when verification reads, a forged one when the player reads
    events.write_bytes(b"\n".join([*lines[:-1], forged_key, lines[-1]]) + b"\n")
    forged_player = prepare(folder, cache)
    shown = judge(folder, check, forged_player.sha256, forged_player.log_head)
    assert not shown.verified
    assert any("log" in finding and "tampered" in finding for finding in shown.findings), shown.findings
    events.write_bytes(genuine_events)
