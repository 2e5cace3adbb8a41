"""Everything the session player and the video export need, made by one forward pass over a recording.

Why a prepared form: zlib-based RFB encodings cannot be decoded from the middle, so seeking in the raw recording
means decoding from the start. One pass writes, per session and recording, into a cache folder
`CACHE/<session>/<SHA-256 of the recording>/`:

    index.json   size, duration, wall-clock start, the frame table, markers and the key log, and `source`: the
                 SHA-256 and size of exactly the bytes that were decoded
    frames.bin   PNG images back to back: a full keyframe at least every KEYFRAME_INTERVAL seconds of screen
                 activity (and after a resize), between them the changed region of each frame

Why keyed by the recording's hash, and decoded from bytes read once: the recording is read into memory, hashed and
decoded from that same copy, so the frames are what those bytes show and nothing else, whatever the file holds
before or after. A cache keyed by size and modification time could be made to hold frames of forged bytes of the
same size that were put back afterwards with the old time. Whether what is shown is the sealed recording is then a
comparison of that hash with the one in the signed seal (`proxy/audit/evidence.py`); a prepared folder is never
rewritten, so frames served from it stay those of its hash.

A frame is the screen after one or more updates that arrived within FRAME_INTERVAL of each other (at most 10
frames a second), stamped with the time of its last update. The screen at time t is the last keyframe at or before
t with the deltas after it up to t: at most KEYFRAME_INTERVAL / FRAME_INTERVAL images, whatever the session's
length. The player fetches exactly that byte range of frames.bin.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tempfile
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from policies.shortcuts import keysym_name, modifier_of
from proxy.audit.rfbdecode import Replay
from proxy.audit.sessions import read_meta
from proxy.sessiondir import EVENTS, SCREEN
from proxy.eventlog import GENESIS, read_events

FORMAT = 4  # bump when the prepared form changes: older caches are rebuilt (4: the log's head in `source`)
FRAME_INTERVAL = 0.1
KEYFRAME_INTERVAL = 10.0
MARKER_EVENTS = {"key_blocked": "blocked", "key_dropped": "dropped", "click_dropped": "dropped",
                 "cut_text_dropped": "cut-text", "limit_hit": "limit"}
# frame table columns
T, KEY, X, Y, W, H, OFFSET, LENGTH = range(8)


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _unpng(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:
        return np.asarray(picture.convert("RGB"))


def _start_epoch(meta: dict[str, Any], events: list[dict[str, Any]]) -> float:
    try:
        return datetime.fromisoformat(meta["start"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return float(events[0]["t"]) if events else 0.0


# The input fields the player reads, with the bound RFB gives each (a u8 button mask, u16 coordinates, u32 keysyms).
INPUT_FIELDS: dict[str, tuple[tuple[str, int], ...]] = {
    "pointer": (("mask", 1 << 8), ("x", 1 << 16), ("y", 1 << 16)),
    **{kind: (("keysym", 1 << 32),) for kind in ("key", "key_blocked", "key_dropped")},
}


def _timed_events(folder: Path, raw: bytes | None = None) -> list[dict[str, Any]]:
    """The log's events with a time, after `check_input_fields`: a field of the wrong type is a ValueError naming
    the file, the event and the field (the service answers 409 with it), never an int() error without context.
    `raw`: the log's bytes as already read (and their head recorded), so that what is shown is what was hashed."""
    events = read_events(folder / EVENTS) if raw is None else _parse_events(raw)
    check_input_fields(folder / EVENTS, events)
    return [event for event in events if isinstance(event.get("t"), (int, float))]


def _parse_events(raw: bytes) -> list[dict[str, Any]]:
    """read_events of bytes already read."""
    out = []
    for line in raw.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def _head_of(raw: bytes) -> str | None:
    """The head of a log's bytes (the SHA-256 of its last line: what a seal's hash and `audit verify`'s head are)
    when every line names the hash of the one before it, so that the head stands for every line read; None for an
    empty log or a broken chain (which then matches no verified head)."""
    prev = GENESIS
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict) or record.get("prev") != prev:
            return None
        prev = hashlib.sha256(line).hexdigest()
    return None if prev == GENESIS else prev


def log_head(folder: Path) -> str | None:
    """The head of the session's log as it is now (None when it is missing or empty)."""
    try:
        return _head_of((Path(folder) / EVENTS).read_bytes())
    except OSError:
        return None


def check_input_fields(path: Path, events: list[dict[str, Any]]) -> None:
    """Raise ValueError naming `path`, the event's number (as `audit sessions` counts them) and the field when an
    input event's mask, coordinate or keysym is not a whole number in its RFB range, or its key name not text."""
    for number, event in enumerate(events, 1):
        for name, bound in INPUT_FIELDS.get(event.get("event"), ()):  # type: ignore[arg-type]
            value = event.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < bound:
                raise ValueError(f"{path}: event {number} ({event.get('event')}): field {name!r} is {value!r}, "
                                 f"not a whole number from 0 to {bound - 1}")
        if event.get("event") in ("key", "key_blocked", "key_dropped") and \
                not isinstance(event.get("name", ""), (str, type(None))):
            raise ValueError(f"{path}: event {number} ({event.get('event')}): field 'name' is "
                             f"{event.get('name')!r}, not a key name")


def key_label(name: str, keysym: int, held: set[str]) -> str:
    """Printable keys as typed; anything else, or anything with Ctrl/Alt/Super held, as <Mods+name>."""
    others = held - {"shift"}
    if not others and 0x20 <= keysym <= 0x7E:
        return chr(keysym)
    order = [("ctrl", "Ctrl"), ("alt", "Alt"), ("super", "Super"), ("shift", "Shift")]
    return "<" + "+".join([*(label for group, label in order if group in held), name]) + ">"


def key_log(events: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    """Key presses in order with their session time; modifiers alone are not entries but shape the next ones."""
    held: set[str] = set()
    out = []
    for event in events:
        kind = event.get("event")
        if kind not in ("key", "key_blocked", "key_dropped"):
            continue
        keysym = int(event.get("keysym") or 0)
        modifier = modifier_of(keysym)
        down = bool(event.get("down"))
        if modifier is not None:
            if kind == "key":
                (held.add if down else held.discard)(modifier)
            continue
        if not down:
            continue
        name = event.get("name") or keysym_name(keysym)
        out.append({"t": round(event["t"] - start, 3), "wall": event["t"], "label": key_label(name, keysym, held),
                    "status": {"key": "forwarded", "key_blocked": "blocked", "key_dropped": "dropped"}[kind]})
    return out


def markers(events: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    out = []
    for event in events:
        kind = MARKER_EVENTS.get(event.get("event", ""))
        if kind is None:
            continue
        detail = event.get("shortcut") or event.get("limit") or event.get("direction") or event.get("name") or ""
        out.append({"t": round(event["t"] - start, 3), "wall": event["t"], "kind": kind, "event": event["event"],
                    "detail": str(detail)})
    return out


POINTER_INTERVAL = 0.1


def pointer_track(events: list[dict[str, Any]], start: float) -> list[list]:
    """Where the researcher's pointer was: [t, x, y, buttons] at every button change and at most every
    POINTER_INTERVAL seconds of motion (the kiosk's cursor is a shape the client draws, not part of the screen, so the
    player draws the pointer from the log)."""
    out: list[list] = []
    last_t, last_mask = -1e9, -1
    for event in events:
        if event.get("event") != "pointer":
            continue
        t, mask = event["t"] - start, int(event.get("mask") or 0)
        if mask != last_mask or t - last_t >= POINTER_INTERVAL:
            out.append([round(t, 3), int(event.get("x") or 0), int(event.get("y") or 0), mask])
            last_t, last_mask = t, mask
    return out


def _apply(image: np.ndarray | None, frame: list, tile: np.ndarray) -> np.ndarray:
    """The screen after one stored frame: a keyframe replaces it, a delta is pasted at its place."""
    if frame[KEY]:
        return tile.copy()
    assert image is not None, "a delta before any keyframe"
    image[frame[Y]:frame[Y] + frame[H], frame[X]:frame[X] + frame[W]] = tile
    return image


@dataclass
class Player:
    """A prepared session: its index and frames file."""

    folder: Path
    index: dict[str, Any]

    @property
    def frames(self) -> list[list]:
        return self.index["frames"]

    @property
    def sha256(self) -> str:
        """SHA-256 of the recording bytes these frames were decoded from."""
        return self.index["source"]["sha256"]

    @property
    def log_head(self) -> str | None:
        """SHA-256 of the last line of the log the key log, markers and metadata were read from (None: no lines)."""
        return self.index["source"].get("log_head")

    def keyframe_before(self, seconds: float) -> int | None:
        """Index of the last keyframe at or before `seconds` (None before the first frame)."""
        times = self.index["frame_times"]
        last = bisect_right(times, seconds) - 1
        while last >= 0 and not self.frames[last][KEY]:
            last -= 1
        return last if last >= 0 else None

    def frame_at(self, seconds: float) -> np.ndarray:
        """The screen at `seconds` of session time: one keyframe and the deltas after it."""
        width, height = self.index["width"], self.index["height"]
        first = self.keyframe_before(seconds)
        if first is None:
            return np.zeros((height, width, 3), np.uint8)
        last = bisect_right(self.index["frame_times"], seconds) - 1
        with open(self.folder / "frames.bin", "rb") as handle:
            start = self.frames[first][OFFSET]
            handle.seek(start)
            blob = handle.read(self.frames[last][OFFSET] + self.frames[last][LENGTH] - start)
        image: np.ndarray | None = None
        for frame in self.frames[first:last + 1]:
            data = blob[frame[OFFSET] - start:frame[OFFSET] - start + frame[LENGTH]]
            image = _apply(image, frame, _unpng(data))
        assert image is not None
        return image

    def iter_images(self, fps: float) -> Iterator[np.ndarray]:
        """The screen sampled at `fps` from 0 to the session's end, decoding each stored image once."""
        width, height = self.index["width"], self.index["height"]
        image = np.zeros((height, width, 3), np.uint8)
        count = max(1, int(round(self.index["duration"] * fps)))
        position = 0
        frames = self.frames
        with open(self.folder / "frames.bin", "rb") as handle:
            for number in range(count):
                moment = number / fps
                while position < len(frames) and frames[position][T] <= moment:
                    frame = frames[position]
                    handle.seek(frame[OFFSET])
                    image = _apply(image, frame, _unpng(handle.read(frame[LENGTH])))
                    position += 1
                yield image


def read_source(folder: Path) -> tuple[bytes, dict[str, Any]]:
    """The recording's bytes, read once, and `source`: the SHA-256 and size of exactly these bytes (and the file's
    modification time before the read, a hint for `prepare_ended` only; it proves nothing)."""
    path = folder / SCREEN
    mtime_ns = path.stat().st_mtime_ns
    data = path.read_bytes()
    return data, {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "mtime_ns": mtime_ns}


_ANY_LOG = object()


def _cached(target: Path, sha256: str, head: Any = _ANY_LOG) -> dict[str, Any] | None:
    """The index prepared in `target` from the recording bytes whose hash is `sha256` and, when `head` is given, from
    the log whose head is `head` (its key log, markers and metadata were read from that log); None if there is
    none."""
    try:
        index = json.loads((target / "index.json").read_text())
    except (OSError, ValueError):
        return None
    source = index.get("source") if isinstance(index, dict) else None
    if not isinstance(source, dict) or index.get("format") != FORMAT or source.get("sha256") != sha256 or \
            not (target / "frames.bin").is_file() or (head is not _ANY_LOG and source.get("log_head") != head):
        return None
    return index


def _prepared_dirs(session_cache: Path) -> list[Path]:
    try:
        return [p for p in session_cache.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []


def sealed_sha256(folder: Path) -> str | None:
    """The recording hash in the log's last line if it is a seal (None otherwise). Only a hint of what to prepare:
    whether the seal is genuine is `audit verify`'s business."""
    try:
        last = (folder / EVENTS).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        seal = json.loads(last)
    except (OSError, ValueError):
        return None
    if not isinstance(seal, dict) or seal.get("event") != "seal":
        return None
    recording = seal.get("recording")
    sha = recording.get("sha256") if isinstance(recording, dict) else None
    return sha if isinstance(sha, str) else None


def is_prepared(folder: str | Path, cache: str | Path) -> bool:
    """True when `cache` holds the player of this recording as it is now (reads and hashes the recording)."""
    folder = Path(folder)
    try:
        _, source = read_source(folder)
    except OSError:
        return False
    return _cached(Path(cache) / folder.name / source["sha256"], source["sha256"], log_head(folder)) is not None


def _looks_prepared(folder: Path, cache: Path, sealed: str | None) -> bool:
    """Without reading the recording: prepared from the sealed bytes, or from a file of this size and modification
    time (so that a recording that does not match its seal is not decoded again every round)."""
    session_cache = cache / folder.name
    if sealed is not None and _cached(session_cache / sealed, sealed) is not None:
        return True
    try:
        stat = (folder / SCREEN).stat()
    except OSError:
        return False
    for prepared in _prepared_dirs(session_cache):
        index = _cached(prepared, prepared.name)
        source = (index or {}).get("source") or {}
        if source.get("size") == stat.st_size and source.get("mtime_ns") == stat.st_mtime_ns:
            return True
    return False


def prepare_ended(root: str | Path, cache: str | Path, limit: int | None = None) -> list[str]:
    """Prepare the players of sealed sessions under `root` that have none yet (newest first), so that an auditor's
    first look does not wait for the decoding pass. Returns the sessions prepared; a recording that cannot be
    decoded is skipped (verify reports it). What this prepares is only a head start: what the player shows is
    chosen by the hash of the bytes it reads when asked (`prepare`)."""
    from proxy.sessiondir import is_session_folder, session_folders

    done: list[str] = []
    if not Path(root).is_dir():
        return done
    for folder in reversed(session_folders(root)):
        if limit is not None and len(done) >= limit:
            break
        if not is_session_folder(folder) or not (folder / SCREEN).is_file():
            continue
        try:
            lines = (folder / EVENTS).read_bytes().rstrip(b"\n").rsplit(b"\n", 1)
            if b'"event":"seal"' not in lines[-1]:
                continue  # still being recorded
            if _looks_prepared(folder, Path(cache), sealed_sha256(folder)):
                continue
            prepare(folder, cache)
        except (OSError, ValueError):
            continue
        done.append(folder.name)
    return done


def prepare(folder: str | Path, cache: str | Path, progress: Callable[[float], None] | None = None) -> Player:
    """The prepared player of a session's recording as it is now: the file is read once, hashed, and the frames are
    those decoded from that very copy (made once per hash, cached in `cache/<session>/<sha256>`). The key log,
    markers and metadata come from the log read once too, whose head the index records (`Player.log_head`): a cache
    made from another log (one swapped in while it was prepared) is made again."""
    folder = Path(folder)
    if not (folder / SCREEN).is_file():
        raise FileNotFoundError(f"{folder / SCREEN}: the session has no screen recording")
    raw_log = (folder / EVENTS).read_bytes() if (folder / EVENTS).is_file() else b""
    data, source = read_source(folder)
    source["log_head"] = _head_of(raw_log)
    sha = source["sha256"]
    session_cache = Path(cache) / folder.name
    target = session_cache / sha
    index = _cached(target, sha, source["log_head"])
    if index is not None:
        return Player(target, index)
    session_cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{sha[:16]}.", dir=session_cache))
    try:
        index = _build(folder, data, work, source, progress, raw_log)
        del data
        done = _cached(target, sha, source["log_head"])
        if done is not None:  # another preparation of the same bytes finished first: use it, it is the same
            shutil.rmtree(work, ignore_errors=True)
            return Player(target, done)
        if target.exists():  # not a valid player (an interrupted removal): replaced whole
            shutil.rmtree(target)
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _prune(session_cache, keep=sha)
    return Player(target, index)


def _prune(session_cache: Path, keep: str) -> None:
    """Remove what this session's cache holds besides the player of `keep` (players of bytes the file no longer
    holds, and the flat layout of older formats); temporary folders of preparations under way stay."""
    for path in session_cache.iterdir():
        if path.name == keep or path.name.startswith("."):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _build(folder: Path, data: bytes, out: Path, source: dict[str, Any],
           progress: Callable[[float], None] | None, raw_log: bytes | None = None) -> dict:
    # a log the player cannot read is refused before the recording is decoded
    all_events = read_events(folder / EVENTS) if raw_log is None else _parse_events(raw_log)
    events = _timed_events(folder, raw_log)
    replay = Replay(folder / SCREEN, data)
    fb = replay.framebuffer
    frames: list[list] = []
    offset = 0
    last_key = -1e9
    pending: list[int] | None = None  # union box of updates not yet written
    pending_since = 0.0
    with open(out / "frames.bin", "wb") as blob:
        def emit(seconds: float) -> None:
            nonlocal offset, last_key, pending
            key = fb.resized or not frames or seconds - last_key >= KEYFRAME_INTERVAL or \
                (frames and (fb.width, fb.height) != tuple(frames[-1][8:10]))
            if key:
                x, y, w, h = 0, 0, fb.width, fb.height
                last_key = seconds
                fb.resized = False
            else:
                x, y, w, h = pending[0], pending[1], pending[2] - pending[0], pending[3] - pending[1]
            data = _png(fb.image[y:y + h, x:x + w])
            blob.write(data)
            frames.append([round(seconds, 4), int(bool(key)), x, y, w, h, offset, len(data), fb.width, fb.height])
            offset += len(data)
            pending = None

        messages = replay.messages()
        for message in messages:
            if message.kind != "update" or message.box is None:
                continue
            x, y, w, h = message.box
            if pending is None:
                pending, pending_since = [x, y, x + w, y + h], message.seconds
            else:
                pending = [min(pending[0], x), min(pending[1], y), max(pending[2], x + w), max(pending[3], y + h)]
            following = replay.next_start()
            if following is None or following - pending_since >= FRAME_INTERVAL or fb.resized:
                emit(message.seconds)
                if progress is not None and replay.end_seconds:
                    progress(min(1.0, message.seconds / replay.end_seconds))
        if pending is not None:
            emit(replay.end_seconds)
    # the metadata the seal signed, from the log read above (meta.json is read separately, so only without a seal)
    last = all_events[-1] if all_events else {}
    sealed_meta = last.get("meta") if last.get("event") == "seal" else None
    meta = sealed_meta if isinstance(sealed_meta, dict) else read_meta(folder)
    start = _start_epoch(meta, events)
    index = {
        "format": FORMAT, "session": folder.name, "source": source,
        "width": replay.init["width"], "height": replay.init["height"],
        "duration": round(replay.end_seconds, 3), "start": start,
        "start_iso": datetime.fromtimestamp(start, timezone.utc).isoformat(),
        "recipient": meta.get("recipient"), "release": meta.get("release"), "end_reason": replay.end_reason,
        "frame_interval": FRAME_INTERVAL, "keyframe_interval": KEYFRAME_INTERVAL,
        "columns": ["t", "key", "x", "y", "w", "h", "offset", "length", "screen_w", "screen_h"],
        "frames": frames, "frame_times": [frame[T] for frame in frames],
        "markers": markers(events, start), "keys": key_log(events, start), "pointer": pointer_track(events, start),
    }
    (out / "index.json").write_text(json.dumps(index, separators=(",", ":")))
    return index


def export_video(player: Player, path: str | Path, fps: float = 10.0, ffmpeg: str = "ffmpeg",
                 metadata: dict[str, str] | None = None) -> Path:
    """The session as an H.264 MP4 of its full duration at its screen size (written to a temporary name first);
    `metadata` adds container tags (the export's verification stamp goes in `comment`)."""
    if shutil.which(ffmpeg) is None:
        raise FileNotFoundError("ffmpeg is not installed (scripts/setup.sh installs Debian's ffmpeg)")
    path = Path(path)
    width, height = player.index["width"], player.index["height"]
    temporary = path.with_name(f".{path.name}.part.mp4")
    command = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{width}x{height}", "-r", f"{fps:g}", "-i", "-",
               "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-c:v", "libx264", "-preset", "veryfast", "-crf", "23",
               "-pix_fmt", "yuv420p", "-movflags", "+faststart",
               "-metadata", f"title=safeshare session {player.index['session']}",
               "-metadata", f"creation_time={player.index['start_iso']}",
               *[arg for key, value in (metadata or {}).items() for arg in ("-metadata", f"{key}={value}")],
               str(temporary)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        for image in player.iter_images(fps):
            if image.shape[:2] != (height, width):  # a resized screen: fit it into the video's size
                fitted = np.zeros((height, width, 3), np.uint8)
                h, w = min(height, image.shape[0]), min(width, image.shape[1])
                fitted[:h, :w] = image[:h, :w]
                image = fitted
            proc.stdin.write(np.ascontiguousarray(image).tobytes())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.wait() != 0:
        temporary.unlink(missing_ok=True)
        raise RuntimeError(f"ffmpeg failed: {stderr.strip()[-500:]}")
    os.replace(temporary, path)
    return path
