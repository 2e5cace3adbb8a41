"""Where a per-recipient proxy listens, and how it tells websockify's token plugin.

A per-recipient proxy (`safeshare proxy-for`) speaks RFB with security type None: whoever reaches its socket gets a
session as that recipient. So it listens only where the host decides who may connect: a Unix socket (file
permissions) or a loopback port (where the proxy admits only the connections whose socket belongs to its own user or
to the users it is told, websockify's: `proxy.peer_uid`). When it is listening it publishes the address in a small JSON file (the *listing*),
which the token plugin reads after a token verified, to hand websockify the recipient's proxy as the target. A
listing names its recipient, so a listing copied to another recipient's name is not followed.

Light on purpose (standard library only): websockify's token plugin imports it in websockify's process.
"""
from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LISTINGS = "proxies"  # SITE/proxies/<rid>.json: where each per-recipient proxy listens; <rid>.sock by default
UNIX_PREFIX = "unix:"
# websockify's convention for a Unix-socket target returned by a token plugin
WEBSOCKIFY_UNIX = "unix_socket"


@dataclass(frozen=True)
class ListenAddress:
    """`unix:PATH` or `HOST:PORT` with a loopback HOST (port 0: chosen by the kernel)."""

    unix_path: Path | None = None
    host: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> "ListenAddress":
        if text.startswith(UNIX_PREFIX):
            path = text[len(UNIX_PREFIX):]
            if not path:
                raise ValueError("unix: needs a socket path")
            return cls(unix_path=Path(path).absolute())
        host, sep, port_text = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
            raise ValueError(f"listen address must be unix:PATH or HOST:PORT, got {text!r}")
        if not _is_loopback(host):
            raise ValueError(f"{host} is not a loopback address: the proxy behind websockify listens on a Unix "
                             "socket or on loopback only (it does not authenticate its clients)")
        return cls(host=host, port=int(port_text))

    def __str__(self) -> str:
        if self.unix_path is not None:
            return f"{UNIX_PREFIX}{self.unix_path}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{host}:{self.port}"

    def websockify_target(self) -> list[str]:
        """The target as websockify's token plugins return it: [host, port] or ["unix_socket", path]."""
        if self.unix_path is not None:
            return [WEBSOCKIFY_UNIX, str(self.unix_path)]
        return [str(self.host), str(self.port)]


def listing_path(site: Any, recipient: str) -> Path:
    """Where the proxy of `recipient` at `site` (deploy.site.folder.Site) publishes its address."""
    return site.root / LISTINGS / f"{site.recipient_id(recipient)}.json"


def default_listen(site: Any, recipient: str) -> str:
    """The Unix socket the proxy of `recipient` listens on unless told otherwise."""
    return f"unix:{site.root / LISTINGS / site.recipient_id(recipient)}.sock"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def publish(listing: Path, recipient: str, address: ListenAddress) -> None:
    """Write the listing under a temporary name and rename it: a reader sees the old listing or the new one."""
    listing.parent.mkdir(parents=True, exist_ok=True)
    staged = listing.with_name(f".{listing.name}.{os.getpid()}")
    staged.write_text(json.dumps({"recipient": recipient, "listen": str(address), "pid": os.getpid()}))
    staged.chmod(0o644)
    os.replace(staged, listing)


def withdraw(listing: Path, address: ListenAddress) -> None:
    """Remove the listing if it still names `address` (a newer proxy may have replaced it)."""
    try:
        if json.loads(listing.read_text()).get("listen") == str(address):
            listing.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def read_listing(listing: Path, recipient: str) -> ListenAddress | None:
    """The address the recipient's proxy published, or None (no proxy, a listing of someone else, unreadable)."""
    try:
        data = json.loads(listing.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("recipient") != recipient or not isinstance(data.get("listen"), str):
        return None
    try:
        return ListenAddress.parse(data["listen"])
    except ValueError:
        return None
