"""policies.recipient: the one home of recipient policies (schema, screen, expiry), and issue_for_policy, the one
way a token is issued under a policy."""
from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from policies.recipient import (PolicyError, RecipientPolicy, load_recipient_policy, parse_screen,
                                recipient_policy_json_schema)
from proxy.tokens import AccessEnded, TokenStore, issue_for_policy

REPO = Path(__file__).resolve().parents[1]


def test_shipped_schema_matches_code():
    shipped = REPO / "policies" / "schemas" / "recipient-policy.schema.json"
    assert json.loads(shipped.read_text()) == recipient_policy_json_schema()


def test_every_example_recipient_policy_loads():
    examples = sorted((REPO / "policies" / "examples").glob("recipient-*.yaml"))
    assert examples
    for path in examples:
        assert load_recipient_policy(path).recipient


@pytest.mark.parametrize("screen, size", [(None, None), ("1600x900", (1600, 900)), (" 1920 X 1080 ", (1920, 1080)),
                                          ({"width": 1024, "height": 768}, (1024, 768))])
def test_the_screen_is_parsed_once_here(screen, size):
    policy = RecipientPolicy(recipient="r", screen=screen)
    assert policy.screen_size == size
    assert policy.screen_text == (f"{size[0]}x{size[1]}" if size else "1280x800")


@pytest.mark.parametrize("screen, words", [("1280", "WIDTHxHEIGHT"), ("10x10", "outside"), ("99999x800", "outside"),
                                           ({"width": 800}, "exactly width and height")])
def test_a_bad_screen_is_an_error_naming_it(tmp_path, screen, words):
    path = tmp_path / "r.yaml"
    path.write_text(json.dumps({"recipient": "r", "screen": screen}))
    with pytest.raises(PolicyError, match=words) as error:
        load_recipient_policy(path)
    assert str(path) in str(error.value) and "screen" in str(error.value)
    if isinstance(screen, str):
        with pytest.raises(ValueError, match=words):
            parse_screen(screen)


def test_unknown_keys_and_bad_files_are_errors(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("recipient: r\nlimits: {idle_second: 5}\n")
    with pytest.raises(PolicyError, match="idle_second"):
        load_recipient_policy(path)
    path.write_text("- a list\n")
    with pytest.raises(PolicyError, match="mapping"):
        load_recipient_policy(path)
    with pytest.raises(PolicyError, match="missing.yaml"):
        load_recipient_policy(tmp_path / "missing.yaml")


def test_access_ends_at_the_end_of_the_expiry_day():
    policy = RecipientPolicy(recipient="r", expires=date(2027, 6, 30))
    assert policy.access_ends == datetime(2027, 7, 1, tzinfo=timezone.utc)
    assert RecipientPolicy(recipient="r").access_ends is None


def test_issue_for_policy_caps_the_expiry_and_refuses_after_the_policy_ended(tmp_path):
    now = datetime(2027, 6, 30, 12, tzinfo=timezone.utc)
    store = TokenStore(f"sqlite:///{tmp_path / 'tokens.db'}", clock=lambda: now)
    try:
        policy = RecipientPolicy(recipient="ann", release="adult/abc", expires=date(2027, 6, 30))
        issued = issue_for_policy(store, policy, tmp_path / "ann.yaml", "127.0.0.1:5900",
                                  expires_at=now + timedelta(days=30))
        assert issued.expires_at == datetime(2027, 7, 1, tzinfo=timezone.utc)   # capped at the policy's end
        grant = store.verify(issued.token)
        assert grant.release == "adult/abc" and grant.policy_file == str(tmp_path / "ann.yaml")
        shorter = issue_for_policy(store, policy, tmp_path / "ann.yaml", "127.0.0.1:5900",
                                   expires_at=now + timedelta(hours=1), release="adult/other")
        assert shorter.expires_at == now + timedelta(hours=1)
        assert store.list_tokens("ann")[-1].release == "adult/other"
        with pytest.raises(AccessEnded, match="ann"):
            issue_for_policy(store, policy, tmp_path / "ann.yaml", "127.0.0.1:5900",
                             expires_at=now + timedelta(days=30), now=now + timedelta(days=1))
        assert len(store.list_tokens("ann")) == 2   # nothing issued
    finally:
        store.dispose()


def test_the_gateway_applies_the_limits_the_token_was_issued_with(tmp_path):
    """The token row holds the policy's limits: a later edit of the policy file does not change a live grant (a new
    policy means a new token: provisioning re-issues when the policy's hash changes)."""
    from proxy.gateway import Gateway
    from proxy.limits import SessionLimits

    path = tmp_path / "ann.yaml"
    path.write_text("recipient: ann\nrelease: adult/abc\nlimits: {idle_seconds: 42, keys: {rate: 3}}\n")
    policy = load_recipient_policy(path)
    store = TokenStore(f"sqlite:///{tmp_path / 'tokens.db'}")
    try:
        issued = issue_for_policy(store, policy, path, "127.0.0.1:5900",
                                  expires_at=datetime.now(timezone.utc) + timedelta(hours=1))
        path.write_text("recipient: ann\nlimits: {idle_seconds: 9999}\n")   # edited after issuing
        grant = store.verify(issued.token)
        assert SessionLimits.model_validate_json(grant.limits) == policy.limits
        gateway = Gateway(store, tmp_path / "sessions", novnc_dir=None)
        upstream, limits, release = gateway._resolve(grant)
        assert limits.idle_seconds == 42 and limits.keys.rate == 3 and release == "adult/abc"
        assert upstream.describe() == "127.0.0.1:5900"
        # a token issued without a policy snapshot (older rows) still reads its policy file
        legacy = store.issue("ann", "127.0.0.1:5900", policy_file=str(path), expires_at=issued.expires_at)
        assert gateway._resolve(store.verify(legacy.token))[1].idle_seconds == 9999
    finally:
        store.dispose()
