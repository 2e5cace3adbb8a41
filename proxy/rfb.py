"""RFB (RFC 6143 and the community rfbproto document) constants and small pure helpers.

What the proxy's framing (`proxy.rfbframe`) and handshakes (`proxy.handshake`) build on: message types, security
types, encodings and their allowlist, pixel formats, protocol versions, VNC authentication. Keysym names and the
blocked shortcuts' grammar are a policy's vocabulary and live in `policies.shortcuts`. Nothing here does I/O.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass


class ProtocolError(Exception):
    """A peer broke the protocol or asked for something the proxy does not allow; the session must end."""


# Client-to-server message types that the proxy accepts. Anything else ends the session.
C_SET_PIXEL_FORMAT = 0
C_SET_ENCODINGS = 2
C_FB_UPDATE_REQUEST = 3
C_KEY_EVENT = 4
C_POINTER_EVENT = 5
C_CLIENT_CUT_TEXT = 6

# Server-to-client message types that the proxy can frame.
S_FB_UPDATE = 0
S_SET_COLOUR_MAP = 1
S_BELL = 2
S_SERVER_CUT_TEXT = 3

SEC_INVALID = 0
SEC_NONE = 1
SEC_VNC_AUTH = 2

ENC_RAW = 0
ENC_COPYRECT = 1
ENC_RRE = 2
ENC_ZLIB = 6
ENC_TIGHT = 7
ENC_ZRLE = 16
ENC_CURSOR = -239
ENC_DESKTOP_SIZE = -223
ENC_LAST_RECT = -224
ENC_EXT_DESKTOP_SIZE = -308
ENC_EXTENDED_CLIPBOARD = -1063131698  # 0xC0A1E5CE as s32; listed so tests can name it

# Pseudo-encodings that only tune the server's encoder and never produce a rectangle of their own.
ENC_JPEG_QUALITY = range(-32, -22)
ENC_COMPRESS_LEVEL = range(-256, -246)

# Encodings the proxy can frame on the way back. Everything else (extended clipboard, extended mouse buttons, xvp,
# gii, VMware, QEMU key events, fences, continuous updates, ...) is stripped from SetEncodings, so the server never
# switches on a protocol extension the proxy would have to pass through blind.
FRAMEABLE_ENCODINGS = frozenset(
    {ENC_RAW, ENC_COPYRECT, ENC_RRE, ENC_ZLIB, ENC_TIGHT, ENC_ZRLE, ENC_CURSOR, ENC_DESKTOP_SIZE, ENC_LAST_RECT,
     ENC_EXT_DESKTOP_SIZE}
)
ALLOWED_ENCODINGS = FRAMEABLE_ENCODINGS | frozenset(ENC_JPEG_QUALITY) | frozenset(ENC_COMPRESS_LEVEL)
MAX_ENCODINGS = 64  # noVNC sends about 25; more is either a bug or an attack
MAX_CURSOR_SIDE = 512
MAX_NAME_LENGTH = 1024

PROTOCOL_VERSION_RE = re.compile(rb"^RFB (\d{3})\.(\d{3})\n$")


def parse_protocol_version(line: bytes) -> tuple[int, int]:
    """Parse the 12-byte ProtocolVersion and map it onto 3.3, 3.7 or 3.8 as RFC 6143 section 7.1.1 asks."""
    match = PROTOCOL_VERSION_RE.match(line)
    if not match:
        raise ProtocolError(f"bad protocol version {line!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 3:
        raise ProtocolError(f"unsupported protocol version {major}.{minor}")
    if minor >= 8:
        return (3, 8)
    if minor == 7:
        return (3, 7)
    return (3, 3)


@dataclass(frozen=True)
class PixelFormat:
    """The 16-byte PIXEL_FORMAT; the proxy needs it to size Raw, RRE, Cursor and Tight data."""

    bits_per_pixel: int
    depth: int
    big_endian: int
    true_colour: int
    red_max: int
    green_max: int
    blue_max: int
    red_shift: int
    green_shift: int
    blue_shift: int

    STRUCT = struct.Struct(">BBBBHHHBBB3x")

    @classmethod
    def parse(cls, data: bytes) -> "PixelFormat":
        """Parse and validate; a pixel format the proxy cannot size is a protocol error (fail closed)."""
        fields = list(cls.STRUCT.unpack(data))
        fields[2] = 1 if fields[2] else 0  # RFC 6143: the flags are "non-zero" for true; normalise them
        fields[3] = 1 if fields[3] else 0
        pf = cls(*fields)
        if pf.bits_per_pixel not in (8, 16, 32):
            raise ProtocolError(f"unsupported bits-per-pixel {pf.bits_per_pixel}")
        if not 1 <= pf.depth <= pf.bits_per_pixel:
            raise ProtocolError(f"bad depth {pf.depth}")
        if not pf.true_colour and pf.bits_per_pixel != 8:
            # colour maps exist for 8 bits per pixel only; servers disagree on Tight's pixel size for the others
            raise ProtocolError(f"colour-map pixel format with {pf.bits_per_pixel} bits per pixel")
        return pf

    def pack(self) -> bytes:
        return self.STRUCT.pack(
            self.bits_per_pixel, self.depth, self.big_endian, self.true_colour, self.red_max, self.green_max,
            self.blue_max, self.red_shift, self.green_shift, self.blue_shift,
        )

    @property
    def bytes_per_pixel(self) -> int:
        return self.bits_per_pixel // 8

    @property
    def framing(self) -> tuple[int, int]:
        """What the proxy's framing of the server stream depends on: two formats with equal framing size every
        rectangle identically."""
        return (self.bytes_per_pixel, self.tight_pixel_size)

    @property
    def tight_pixel_size(self) -> int:
        """TPIXEL size: 3 bytes for 32-bit true colour with depth 24 and 8-bit channels, else a whole pixel."""
        if (self.true_colour and self.bits_per_pixel == 32 and self.depth == 24
                and self.red_max == self.green_max == self.blue_max == 255):
            return 3
        return self.bytes_per_pixel

    def as_dict(self) -> dict[str, int]:
        return {
            "bits_per_pixel": self.bits_per_pixel, "depth": self.depth, "big_endian": self.big_endian,
            "true_colour": self.true_colour, "red_max": self.red_max, "green_max": self.green_max,
            "blue_max": self.blue_max, "red_shift": self.red_shift, "green_shift": self.green_shift,
            "blue_shift": self.blue_shift,
        }


def filter_encodings(requested: list[int]) -> list[int]:
    """Keep the allowlisted encodings in the client's order of preference, once each."""
    kept: list[int] = []
    for enc in requested:
        if enc in ALLOWED_ENCODINGS and enc not in kept:
            kept.append(enc)
    return kept


def vnc_auth_response(password: bytes, challenge: bytes) -> bytes:
    """DES-encrypt the 16-byte challenge with the password as VNC authentication (RFC 6143 7.2.2) prescribes.

    VNC uses the password, truncated or zero-padded to 8 bytes, with the bits of each byte mirrored, as a DES key.
    Triple DES with three equal keys is single DES, which is how we reach it through `cryptography`.
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    try:
        from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    except ImportError:  # cryptography < 43
        from cryptography.hazmat.primitives.ciphers.algorithms import TripleDES  # type: ignore[no-redef]

    if len(challenge) != 16:
        raise ProtocolError("VNC challenge must be 16 bytes")
    key = bytes(int(f"{b:08b}"[::-1], 2) for b in password[:8].ljust(8, b"\0"))
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()
    return encryptor.update(challenge) + encryptor.finalize()
