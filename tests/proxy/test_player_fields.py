"""The player's 409 for a session whose log holds an input field of the wrong type names the file, the event and
the field (issue 24, item 11 follow-up): a pointer `mask` of "x" was answered "ValueError: invalid literal for
int() with base 10: 'x'", which told the auditor neither where nor what. The log is rewritten as a writer of the
sessions folder would; `audit sessions` already names such a field (tests/test_bad_input_round2.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deploy.custodian.api import create_app
from deploy.provision import Provisioner
from deploy.site.folder import Site
from proxy.audit.player import prepare
from tests.proxy.test_seals import SiteFiles, ordered, record_sessions


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> SiteFiles:
    site = SiteFiles.create(tmp_path_factory.mktemp("player-fields") / "site")
    record_sessions(site, 1)
    return site


@pytest.fixture
def site(recorded: SiteFiles, tmp_path: Path) -> SiteFiles:
    shutil.copytree(recorded.root, tmp_path / "site", symlinks=True)
    return SiteFiles(tmp_path / "site")


def set_field(folder: Path, kind: str, field: str, value) -> int:
    """Give the first `kind` event's `field` the value `value`; returns the event's number (from 1)."""
    lines = (folder / "events.jsonl").read_bytes().splitlines()
    for index, line in enumerate(lines):
        event = json.loads(line)
        if event.get("event") == kind:
            event[field] = value
            lines[index] = json.dumps(event, separators=(",", ":")).encode()
            (folder / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
            return index + 1
    raise AssertionError(f"no {kind} event in {folder}")


@pytest.mark.parametrize("kind, field, value", [
    ("pointer", "mask", "x"), ("pointer", "mask", 300), ("pointer", "x", "10"), ("pointer", "y", True),
    ("key", "keysym", 97.5), ("key", "name", 7),
])
def test_prepare_names_the_file_event_and_field(site: SiteFiles, tmp_path: Path, kind: str, field: str,
                                                value) -> None:
    (folder,) = ordered(site)
    number = set_field(folder, kind, field, value)
    with pytest.raises(ValueError) as raised:
        prepare(folder, tmp_path / "cache")
    message = str(raised.value)
    assert str(folder / "events.jsonl") in message and f"event {number}" in message and f"'{field}'" in message, \
        message
    assert not list((tmp_path / "cache").glob(f"{folder.name}/*/index.json"))  # nothing prepared


def test_the_services_409_names_the_file_and_the_field(site: SiteFiles) -> None:
    (folder,) = ordered(site)
    number = set_field(folder, "pointer", "mask", "x")
    provisioner = Provisioner(Site(site.root))
    try:
        key = provisioner.records.add_key("aud", "auditor")
        with TestClient(create_app(provisioner, expiry_interval=None), raise_server_exceptions=False) as client:
            answer = client.get(f"/audit/sessions/{folder.name}/player", headers={"Authorization": f"Bearer {key}"})
    finally:
        provisioner.close()
    assert answer.status_code == 409, answer.text
    detail = answer.json()["detail"]
    assert str(folder / "events.jsonl") in detail and f"event {number}" in detail and "'mask'" in detail, detail
    assert "'x'" in detail and "invalid literal" not in detail


def test_an_intact_log_still_prepares(site: SiteFiles, tmp_path: Path) -> None:
    (folder,) = ordered(site)
    player = prepare(folder, tmp_path / "cache")
    assert player.index["pointer"] and player.index["keys"]
