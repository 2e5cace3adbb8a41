"""Both RFB handshakes the proxy terminates: towards the client (RFB 3.8 or older, security None: the front end has
authenticated the client before) and towards the enclave's VNC server (None or VNC authentication).

No security type is ever passed through: the proxy chooses its own on each side, so that a client cannot negotiate
anything with the server that the proxy would have to forward blind.
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from proxy import rfb
from proxy.rfb import PixelFormat, ProtocolError
from proxy.transport import ClientTransport, UpstreamTarget


@dataclass(frozen=True)
class ServerInit:
    """What the upstream's ServerInit said, and how the proxy got there."""

    version: tuple[int, int]
    security: int
    width: int
    height: int
    pixel_format: PixelFormat
    name: bytes

    def pack(self) -> bytes:
        """The ServerInit the client gets: the upstream's size, pixel format and name."""
        return (struct.pack(">HH", self.width, self.height) + self.pixel_format.pack()
                + struct.pack(">I", len(self.name)) + self.name)


async def client_handshake(client: ClientTransport) -> tuple[int, int]:
    """ProtocolVersion, security (None), SecurityResult, ClientInit; returns the client's protocol version."""
    reader = client.reader
    client.write(b"RFB 003.008\n")
    await client.drain()
    version = rfb.parse_protocol_version(await reader.readexactly(12))
    if version == (3, 3):
        client.write(struct.pack(">I", rfb.SEC_NONE))
    else:
        client.write(bytes([1, rfb.SEC_NONE]))
        await client.drain()
        (chosen,) = await reader.readexactly(1)
        if chosen != rfb.SEC_NONE:
            raise ProtocolError(f"client chose security type {chosen}")
        if version == (3, 8):
            client.write(struct.pack(">I", 0))
    await client.drain()
    await reader.readexactly(1)  # ClientInit shared flag: the upstream connection is ours, so it is moot
    return version


async def upstream_handshake(upstream: UpstreamTarget, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> ServerInit:
    """Up to RFB 3.8, VNC authentication with the target's password or None without one, a shared ClientInit."""
    version = rfb.parse_protocol_version(await reader.readexactly(12))
    version = min(version, (3, 8))
    writer.write(b"RFB 003.%03d\n" % version[1])
    if version == (3, 3):
        (sec,) = struct.unpack(">I", await reader.readexactly(4))
        if sec == rfb.SEC_INVALID:
            raise ProtocolError("upstream refused: " + (await _read_reason(reader)))
        offered = [sec]
    else:
        (count,) = await reader.readexactly(1)
        if count == 0:
            raise ProtocolError("upstream refused: " + (await _read_reason(reader)))
        offered = list(await reader.readexactly(count))
    if upstream.password is not None and rfb.SEC_VNC_AUTH in offered:
        chosen = rfb.SEC_VNC_AUTH
    elif upstream.password is None and rfb.SEC_NONE in offered:
        chosen = rfb.SEC_NONE
    else:
        raise ProtocolError(f"upstream offers security types {offered}, none usable "
                            f"({'with' if upstream.password is not None else 'without'} a password)")
    if version != (3, 3):
        writer.write(bytes([chosen]))
    if chosen == rfb.SEC_VNC_AUTH:
        assert upstream.password is not None
        challenge = await reader.readexactly(16)
        writer.write(rfb.vnc_auth_response(upstream.password, challenge))
    if chosen == rfb.SEC_VNC_AUTH or version == (3, 8):
        (result,) = struct.unpack(">I", await reader.readexactly(4))
        if result != 0:
            reason = await _read_reason(reader) if version == (3, 8) else ""
            raise ProtocolError(f"upstream authentication failed {reason}".strip())
    writer.write(b"\x01")  # ClientInit: shared, so an operator's viewer is not kicked out
    await writer.drain()
    width, height = struct.unpack(">HH", await reader.readexactly(4))
    pixel_format = PixelFormat.parse(await reader.readexactly(16))
    (name_length,) = struct.unpack(">I", await reader.readexactly(4))
    if name_length > rfb.MAX_NAME_LENGTH:
        raise ProtocolError("desktop name too long")
    name = await reader.readexactly(name_length)
    return ServerInit(version, chosen, width, height, pixel_format, name)


async def _read_reason(reader: asyncio.StreamReader) -> str:
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    return (await reader.readexactly(min(length, 4096))).decode("utf-8", "replace")
