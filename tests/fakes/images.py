"""Images built in memory for attachment tests and the attachment benchmark: real PNG/JPEG
files (Pillow), noisy ones of a given byte size, and a PNG decompression bomb."""

from __future__ import annotations

import io
import os
import struct
import zlib


def make_image(fmt: str = "PNG", size: tuple[int, int] = (64, 48), color=(200, 40, 40)) -> bytes:
    """A solid-colour image in ``fmt`` (PNG, JPEG, WEBP, GIF)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)
    return out.getvalue()


def noisy_jpeg(target_bytes: int) -> bytes:
    """A 4:3 photo-like JPEG of about ``target_bytes`` or a little more (random noise
    compresses like a detailed photo: ~1 byte per pixel at quality 92, so 10 MB is ~3,700 ×
    2,800 pixels, a phone camera's size)."""
    from PIL import Image

    width = int((target_bytes / 0.95 * 4 / 3) ** 0.5)
    height = width * 3 // 4
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "JPEG", quality=92)
    return out.getvalue()


def noisy_png(target_bytes: int) -> bytes:
    """A square PNG of about ``target_bytes`` (random RGB pixels do not compress: ~3 bytes per
    pixel), e.g. a large screenshot's size."""
    from PIL import Image

    side = int((target_bytes / 3) ** 0.5)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, "PNG", compress_level=1)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(side: int = 16_000) -> bytes:
    """A valid 1-bit PNG of ``side`` × ``side`` black pixels: ~30 KB on disk, ``side²`` pixels
    (256 million by default: decoded as RGB, ~770 MB)."""
    row = b"\x00" + b"\x00" * ((side + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
