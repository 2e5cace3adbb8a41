"""proxy.sessiondir: the one home of a session folder's format, as the recorder writes it and the auditors read it."""
from __future__ import annotations

import json

from proxy import sessiondir
from proxy.sessiondir import EVENTS, KNOWN_FILES, META, PCAP, SCREEN, read_meta, write_meta


def test_the_names_are_the_ones_every_reader_uses():
    from proxy.audit import player, sessions, verify
    from proxy.capture import CAPTURE_FILE

    assert (EVENTS, META, SCREEN, PCAP) == ("events.jsonl", "meta.json", "screen.rfbrec", "network.pcap")
    assert KNOWN_FILES == {EVENTS, META, SCREEN, PCAP} and CAPTURE_FILE == PCAP
    assert verify.EVENTS is EVENTS and player.SCREEN is SCREEN and sessions.read_meta is read_meta


def test_meta_round_trip_is_whole_and_atomic(tmp_path):
    write_meta(tmp_path, {"session": "s1", "end": None})
    write_meta(tmp_path, {"session": "s1", "end": "2026-11-25T13:00:00+00:00", "log_head": "ab" * 32})
    assert read_meta(tmp_path) == {"session": "s1", "end": "2026-11-25T13:00:00+00:00", "log_head": "ab" * 32}
    assert [p.name for p in tmp_path.iterdir()] == [META]   # no temporary file left
    assert json.loads((tmp_path / META).read_text())["session"] == "s1"


def test_unreadable_meta_reads_as_empty(tmp_path):
    assert read_meta(tmp_path) == {}
    (tmp_path / META).write_text("[1, 2]")
    assert read_meta(tmp_path) == {}
    (tmp_path / META).write_text("{not json")
    assert read_meta(tmp_path) == {}


def test_session_folders_are_the_non_hidden_folders_by_name(tmp_path):
    for name in ("s-2", "s-1", ".staging"):
        (tmp_path / name).mkdir()
    (tmp_path / "stray.txt").write_text("")
    (tmp_path / "s-1" / EVENTS).write_text("")
    assert [p.name for p in sessiondir.session_folders(tmp_path)] == ["s-1", "s-2"]
    assert sessiondir.is_session_folder(tmp_path / "s-1") and not sessiondir.is_session_folder(tmp_path / "s-2")
