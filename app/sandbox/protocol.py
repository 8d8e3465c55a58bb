"""Frames between a Preprocessor and its decoder processes.

A frame is an 8-byte prefix (header length, blob length), a JSON header and a raw blob.
JSON rather than pickle: a worker that a crafted file managed to subvert can send
the parent garbage, but never code to run.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

PREFIX = struct.Struct(">II")
MAX_HEADER_BYTES = 1 << 20


class ProtocolError(Exception):
    """The other side closed the pipe or sent something that is not a frame."""


def encode_frame(header: dict, blob: bytes = b"") -> bytes:
    return frame_head(header, len(blob)) + blob


def frame_head(header: dict, blob_len: int) -> bytes:
    """A frame without its blob, which the sender writes after it (a page's megabytes uncopied)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    return PREFIX.pack(len(raw), blob_len) + raw


def decode_header(prefix: bytes) -> tuple[int, int]:
    header_len, blob_len = PREFIX.unpack(prefix)
    if header_len > MAX_HEADER_BYTES:
        raise ProtocolError(f"frame header of {header_len} bytes")
    return header_len, blob_len


def parse_header(raw: bytes) -> dict:
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"bad frame header: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("frame header without a type")
    return header


def read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise ProtocolError("pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> tuple[dict, bytes]:
    """Blocking read of one frame (the worker's side; the parent reads with a deadline)."""
    header_len, blob_len = decode_header(read_exactly(stream, PREFIX.size))
    header = parse_header(read_exactly(stream, header_len))
    return header, read_exactly(stream, blob_len)
