"""Which user opened the other end of a loopback TCP connection, so that a proxy on a loopback port can admit only
the users a Unix socket's file mode would have admitted.

A per-recipient proxy (`safeshare proxy-for`) speaks RFB without authentication: websockify's token plugin checks
the token, and the proxy relies on only websockify being able to reach it. A Unix socket gets that from its file mode
(and the kernel's SO_PEERCRED); a TCP port on loopback has no such thing, any local user can connect. Linux lists
every TCP socket of the network namespace, with the user that created it, in /proc/net/tcp and /proc/net/tcp6; the
connecting socket of a loopback connection is the entry whose local address is the peer's and whose remote address
is ours. A peer in another network namespace cannot reach our loopback at all.

Only what the kernel wrote is trusted: the entry is matched on both addresses and ports, a socket in TIME_WAIT (whose
user the kernel reports as 0) never matches, and no entry, several entries, or an unreadable table is "unknown"
(None), which the proxy refuses (fail closed).
"""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TIME_WAIT = 0x06
Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def _address(text: str) -> Endpoint:
    """A /proc/net/tcp{,6} address `HEX:PORT`: the address is the in-memory (network order) bytes printed as native
    32-bit words, the port a plain hexadecimal number."""
    host, port = text.split(":")
    words = [int(host[i:i + 8], 16) for i in range(0, len(host), 8)]
    raw = struct.pack(f"={len(words)}I", *words)
    return _plain(ipaddress.ip_address(raw)), int(port, 16)


def _plain(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack socket's view of an IPv4 peer)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def endpoint(host: str, port: int) -> Endpoint:
    return _plain(ipaddress.ip_address(host.split("%", 1)[0])), int(port)


def tcp_peer_uid(ours: Endpoint, peer: Endpoint, tables: tuple[Path, ...] = TABLES) -> int | None:
    """The uid of the socket at `peer` connected to `ours` (this process's accepted socket), or None when the kernel's
    tables do not say exactly one."""
    found: set[int] = set()
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8:
                continue
            try:
                local, remote, state, uid = _address(fields[1]), _address(fields[2]), int(fields[3], 16), \
                    int(fields[7])
            except ValueError:
                continue
            if local == peer and remote == ours and state != TIME_WAIT:
                found.add(uid)
    return found.pop() if len(found) == 1 else None


def tables_readable(tables: tuple[Path, ...] = TABLES) -> bool:
    """Whether this system lists its TCP sockets where tcp_peer_uid looks (Linux with /proc)."""
    return any(table.is_file() for table in tables)
