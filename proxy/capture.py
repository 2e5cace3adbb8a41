"""Optional network capture for a session: tcpdump on the enclave's network into `sessions/<id>/network.pcap`.

tcpdump writes the pcap stream to its standard output (`-w - -U`, one flush per packet) and the proxy writes the file
itself, hashing it as it goes, so the capture belongs to the proxy's user whatever user tcpdump drops to, and the
session's metadata can carry the capture's SHA-256 next to the log head. Capturing needs CAP_NET_RAW (root, or the
capability on the tcpdump binary).

Fail closed: when capture is switched on and tcpdump cannot start, the session does not start; when tcpdump stops
during a session, the session ends.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.sessiondir import PCAP as CAPTURE_FILE  # the session folder's name for the capture

START_TIMEOUT = 5.0


class CaptureError(Exception):
    """tcpdump could not start or capture."""


@dataclass(frozen=True)
class CaptureConfig:
    """Interface of the enclave's network (for example its Docker bridge) and an optional BPF filter."""

    interface: str
    bpf_filter: str | None = None
    tcpdump: str = "tcpdump"

    def command(self) -> list[str]:
        cmd = [self.tcpdump, "-i", self.interface, "-n", "-U", "--immediate-mode", "-w", "-"]
        if self.bpf_filter:
            cmd.append(self.bpf_filter)
        return cmd

    def as_dict(self) -> dict[str, Any]:
        return {"interface": self.interface, "filter": self.bpf_filter}


class NetworkCapture:
    """`await start()`, then `await stopped` ends when tcpdump exits on its own; `await stop()` returns a summary."""

    def __init__(self, config: CaptureConfig, path: Path) -> None:
        self.config = config
        self.path = Path(path)
        self._proc: asyncio.subprocess.Process | None = None
        self._copy: asyncio.Task[None] | None = None
        self._digest = hashlib.sha256()
        self.bytes = 0
        self._stderr = b""

    async def start(self) -> None:
        if shutil.which(self.config.tcpdump) is None:
            raise CaptureError(f"{self.config.tcpdump} not found")
        self._proc = await asyncio.create_subprocess_exec(
            *self.config.command(), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        assert self._proc.stderr is not None and self._proc.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while True:
                    line = await self._proc.stderr.readline()
                    if not line:
                        await self._proc.wait()
                        raise CaptureError(f"tcpdump exited with {self._proc.returncode}: "
                                           f"{self._stderr.decode(errors='replace').strip()}")
                    self._stderr += line
                    if b"listening on" in line:
                        break
        except (CaptureError, TimeoutError) as exc:
            await self._kill()
            raise CaptureError(str(exc) or "tcpdump did not start listening") from None
        self._copy = asyncio.create_task(self._copy_out(self._proc.stdout), name="capture-copy")

    async def _copy_out(self, stdout: asyncio.StreamReader) -> None:
        with open(self.path, "xb") as handle:
            while True:
                chunk = await stdout.read(1 << 16)
                if not chunk:
                    return
                handle.write(chunk)
                handle.flush()
                self._digest.update(chunk)
                self.bytes += len(chunk)

    async def wait_stopped(self) -> None:
        """Returns when tcpdump's output ends (it exited); the session treats that as the end of the session."""
        assert self._copy is not None
        await asyncio.shield(self._copy)

    async def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()

    async def stop(self) -> dict[str, Any]:
        if self._proc is None:
            return {**self.config.as_dict(), "file": None}
        if self._proc.returncode is None:
            await asyncio.sleep(0.05)  # let the last packets of the session leave the kernel's buffer
            self._proc.send_signal(signal.SIGINT)  # tcpdump flushes and prints its statistics
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except asyncio.TimeoutError:
                await self._kill()
        if self._copy is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._copy), 5)
            except Exception:
                self._copy.cancel()
        assert self._proc.stderr is not None
        try:
            self._stderr += await asyncio.wait_for(self._proc.stderr.read(), 2)
        except Exception:
            pass
        match = re.search(rb"(\d+) packets? captured", self._stderr)
        return {**self.config.as_dict(), "file": CAPTURE_FILE if self._copy is not None else None,
                "bytes": self.bytes, "sha256": self._digest.hexdigest(),
                "packets": int(match.group(1)) if match else None, "exit_code": self._proc.returncode}
