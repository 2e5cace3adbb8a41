"""The prepared player on a real recorded session (x11vnc on Xvfb through the proxy, the screen changed at known
times): the frame at a seek point equals the screen captured at that moment during the session; keyframes bound the
work of a seek; the exported video has the session's duration and resolution; key log and markers."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from proxy.audit.player import KEY, Player, export_video, key_label, prepare
from safeshare.signing import TrustStore
from proxy.limits import SessionLimits
from tests.proxy.rfbtools import RfbClient
from tests.proxy.test_audit import recorded  # noqa: F401 - fixture
from tests.proxy.test_controls import proxied_session
from tests.proxy.test_replay import HEIGHT, WIDTH, needs_x, put_image, screen, x_screen  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def changing_session(x_screen, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """A 4-second session in which the screen changes three times; the X screen is captured (wall clock) after
    each change, as the researcher saw it."""
    display, port = x_screen
    tmp = tmp_path_factory.mktemp("changing")
    truths: list[tuple[float, np.ndarray]] = []

    async def body(proxy_port: int) -> None:
        client = RfbClient()
        await client.connect(proxy_port, (16, 0))  # ZRLE: lossless, so frames must be equal exactly

        async def keep_requesting() -> None:
            await client.request(False)
            while True:
                await asyncio.sleep(0.03)
                await client.request(True)

        requester = asyncio.create_task(keep_requesting())
        rng = np.random.default_rng(3)
        for step in range(3):
            await asyncio.sleep(1.0)
            block = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
            await asyncio.to_thread(put_image, display, 20 + 60 * step, 30 + 40 * step, block)
            await asyncio.sleep(0.6)  # the update reaches the client well within this
            truths.append((time.time(), await asyncio.to_thread(screen, display)))
            if step == 0:
                await client.pointer(0, 50, 60)  # the researcher's pointer, for the player's overlay
            if step == 1:  # a blocked shortcut (a marker) and a typed key, while the second screen shows
                for sym, down in [(0xFFE3, True), (0x6E, True), (0x6E, False), (0xFFE3, False),
                                  (0x78, True), (0x78, False)]:
                    await client.key(sym, down)
        await asyncio.sleep(0.5)
        requester.cancel()
        await client.close()

    folder, _ = asyncio.run(proxied_session(tmp / "sessions", port, SessionLimits(), body))
    return folder, truths


@needs_x
def test_frame_at_a_seek_point_equals_the_screen_then(changing_session, tmp_path: Path) -> None:
    folder, truths = changing_session
    player = prepare(folder, tmp_path / "cache")
    index = player.index
    assert (index["width"], index["height"]) == (WIDTH, HEIGHT) and 4.0 < index["duration"] < 8.0
    assert index["frames"][0][KEY] == 1
    for wall, truth in truths:
        frame = player.frame_at(wall - index["start"])
        assert np.array_equal(frame, truth), np.argwhere(np.any(frame != truth, axis=2))[:5]
    # before the first change the screen differs from the first capture
    assert not np.array_equal(player.frame_at(truths[0][0] - index["start"] - 0.9), truths[0][1])
    # the cache is reused while the recording is unchanged
    again = prepare(folder, tmp_path / "cache")
    assert again.index == index
    assert [p.name for p in (tmp_path / "cache" / folder.name).iterdir()] == [player.sha256]  # keyed by the bytes
    assert {p.name for p in (tmp_path / "cache" / folder.name / player.sha256).iterdir()} == {"index.json",
                                                                                              "frames.bin"}


@needs_x
def test_seeking_reads_from_the_last_keyframe_only(changing_session, tmp_path: Path) -> None:
    folder, truths = changing_session
    player = prepare(folder, tmp_path / "cache")
    end = player.index["duration"]
    first = player.keyframe_before(end)
    assert first is not None
    span = player.index["frame_times"][first:]
    assert end - span[0] <= player.index["keyframe_interval"] + 1  # never back to the start of a long session


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffmpeg is installed by scripts/setup.sh")
@needs_x
def test_exported_video_has_the_sessions_duration_and_size(changing_session, tmp_path: Path) -> None:
    folder, _ = changing_session
    player = prepare(folder, tmp_path / "cache")
    video = export_video(player, tmp_path / "case.mp4", fps=10)
    probe = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-print_format", "json", "-show_streams", "-show_format", str(video)],
        capture_output=True, text=True, check=True).stdout)
    stream = probe["streams"][0]
    assert (stream["width"], stream["height"]) == (WIDTH, HEIGHT)
    assert abs(float(probe["format"]["duration"]) - player.index["duration"]) < 0.25
    assert not list(tmp_path.glob(".*part*"))
    TrustStore().save(tmp_path / "trust.json")  # `safeshare proxy` seals unsigned: export verifies first
    done = subprocess.run([sys.executable, "-m", "safeshare.cli", "audit", "export", str(folder), "--out",
                           str(tmp_path / "cli.mp4"), "--cache", str(tmp_path / "cache"), "--fps", "5", "--json",
                           "--site", str(tmp_path / "site"), "--trust", str(tmp_path / "trust.json"),
                           "--allow-unsigned"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["width"] == WIDTH and (tmp_path / "cli.mp4").stat().st_size > 1000


def test_key_log_and_markers(recorded, tmp_path: Path) -> None:  # noqa: F811
    player = prepare(recorded, tmp_path / "cache")
    keys = player.index["keys"]
    assert [(k["label"], k["status"]) for k in keys] == [("a", "forwarded"), ("<Ctrl+n>", "blocked")]
    kinds = sorted({m["kind"] for m in player.index["markers"]})
    assert kinds == ["blocked", "cut-text"]
    assert all(0 <= m["t"] <= player.index["duration"] for m in player.index["markers"] + keys)
    assert key_label("Return", 0xFF0D, set()) == "<Return>" and key_label("A", 0x41, {"shift"}) == "A"
    assert key_label("F4", 0xFFC1, {"alt"}) == "<Alt+F4>"
    assert [p[1:] for p in player.index["pointer"]] == [[10, 10, 1], [10, 10, 0]]  # press and release


def test_player_of_a_session_without_recording(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    with pytest.raises(FileNotFoundError):
        prepare(tmp_path / "s", tmp_path / "cache")
    assert isinstance(Player, type)


def test_ended_sessions_are_prepared_ahead(recorded, tmp_path: Path) -> None:  # noqa: F811
    from proxy.audit.player import is_prepared, prepare_ended

    root = tmp_path / "sessions"
    shutil.copytree(recorded, root / recorded.name)
    live = root / "20991231T000000Z-live0000"
    shutil.copytree(recorded, live)
    lines = (live / "events.jsonl").read_bytes().splitlines(keepends=True)
    (live / "events.jsonl").write_bytes(b"".join(lines[:-1]))  # no seal: still being recorded
    assert prepare_ended(root, tmp_path / "cache") == [recorded.name]
    assert is_prepared(root / recorded.name, tmp_path / "cache") and not is_prepared(live, tmp_path / "cache")
    assert prepare_ended(root, tmp_path / "cache") == []  # nothing new
