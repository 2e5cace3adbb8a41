"""Addresses and VNC passwords as every command spells them: one parser for HOST:PORT and one reader for a VNC
password file, so that the proxy, the gateway, the kiosk and the custodian service agree on what they accept."""
from __future__ import annotations

from pathlib import Path


def parse_host_port(text: str, *, default_host: str | None = "127.0.0.1", allow_port_zero: bool = True
                    ) -> tuple[str, int]:
    """(host, port) from `HOST:PORT` (`[::1]:PORT` for IPv6). An empty host is `default_host` (an error when None);
    port 0 (any free port) is allowed unless `allow_port_zero` is False. Raises ValueError naming the text."""
    host, sep, port = text.rpartition(":")
    lowest = 0 if allow_port_zero else 1
    if not sep or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]")
    if not host:
        if default_host is None:
            raise ValueError(f"expected HOST:PORT with a host, got {text!r}")
        host = default_host
    return host, int(port)


def port_number(text: str) -> int:
    """A TCP port for argparse's `type=`: 0 (any free port) to 65535; anything else is an error naming the value
    (argparse exits 2 with it, where a bind would have raised OverflowError)."""
    import argparse

    if not text.strip().isdigit() or not 0 <= int(text) < 65536:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {text!r}")
    return int(text)


def read_vnc_password(path: str | Path) -> bytes:
    """The password of a VNC password file: its first line (x11vnc's -passwdfile format; later lines would be
    view-only passwords, which safeshare never writes)."""
    data = Path(path).read_bytes()
    lines = data.splitlines()
    return lines[0] if lines else b""


__all__ = ["parse_host_port", "port_number", "read_vnc_password"]
