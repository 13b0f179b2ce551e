"""Read a PNG's pixel size from its header (the IHDR chunk), so the tests need no image library."""

from __future__ import annotations

import struct
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels; AssertionError if ``path`` does not start like a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR", f"{path}: no IHDR chunk first"
    width, height = struct.unpack(">II", head[16:24])
    return width, height
