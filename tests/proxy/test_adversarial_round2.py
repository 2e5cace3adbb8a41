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


@pytest.mark.xfail(strict=True, reason=(
    "HOLE (low): a writer of the sessions folder and the database drops every checkpoint of a crashed (or "
    "unsealed-by-them) session's log, rewrites its `connect` line (recipient, and the start in its meta), recomputes "
    "the chain, clears the row's anchors and restarts the gateway: the recovered seal then signs the forged "
    "recipient and start as the session's metadata. `audit verify` says PARTIAL with no line proven, which "
    "--allow-partial accepts (exit 0), and `audit sessions` lists the forged recipient and start as sealed ones "
    "(so --since hides the session). The same gets a wholly invented session sealed by the gateway: a row left open "
    "naming a folder with a log written from scratch without checkpoints. A gateway that signs checkpoints writes one right after every control event "
    "(connect first), so a recovered log whose control event is followed by another line that is not a "
    "checkpoint, or whose first line is not `connect`, has had lines removed: report it as a finding (not "
    "PARTIAL), and let a recovered seal sign only metadata taken from under a proven checkpoint (else mark it "
    "unproven). This conflicts with test_recovered_checkpoints' 'every checkpoint dropped' case, which expects "
    "PARTIAL; the next session must change both."))
def test_a_recovered_log_stripped_of_its_checkpoints_cannot_have_forged_metadata_accepted(site: SiteFiles) -> None:
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
