"""Frames between a Preprocessor and its decoder processes, and the page frame read back.

A frame is an 8-byte prefix (header length, blob length), a JSON header and a raw blob.
JSON rather than pickle: a worker that a crafted file managed to subvert can send
the parent garbage, but never code to run.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Optional

import numpy as np

PREFIX = struct.Struct(">II")
MAX_HEADER_BYTES = 1 << 20


class ProtocolError(Exception):
    """The other side closed the pipe or sent something that is not a frame."""


@dataclass
class RenderedPage:
    """One page as the worker left it: engine-sized pixels plus the geometry to map boxes back."""

    page_number: int
    image: np.ndarray  # uint8 HxW (L) or HxWx3 (RGB), a view of the worker's bytes
    width: int
    height: int
    source_width: int
    source_height: int
    scale: float
    dpi: Optional[float]
    decode_ms: float
    resize_encode_ms: float
    text_layer: Optional[list] = None  # list[TextLine] in engine pixels: the page is read from its PDF text
    text_note: Optional[str] = None  # why a page with a text layer was OCR'd all the same


def page_from_frame(header: dict, blob: bytes, max_side: int, max_pixels: int) -> RenderedPage:
    """A `page` frame read back. Raises ProtocolError (or KeyError, TypeError, ValueError on a
    malformed header) where the frame is not a page within budget."""
    return RenderedPage(
        page_number=int(header["page_number"]), image=page_pixels(header, blob, max_side, max_pixels),
        width=int(header["width"]), height=int(header["height"]), source_width=int(header["source_width"]),
        source_height=int(header["source_height"]), scale=float(header["scale"]),
        dpi=None if header.get("dpi") is None else float(header["dpi"]),
        decode_ms=float(header["decode_ms"]), resize_encode_ms=float(header["resize_encode_ms"]),
        **text_layer_from_frame(header.get("text_layer"), float(header["scale"])),
    )


_MAX_LAYER_TEXT = 200  # characters in one word of a text layer: a longer one is not a word (nor from PDFium)


def text_layer_from_frame(layer, scale: float) -> dict:
    """A page frame's text layer as engine lines (quads in engine pixels, words with theirs), checked: a
    worker that a crafted file subverted can send anything, so anything off the expected shape is a
    ProtocolError, never an exception further on."""
    from app.engines.word_boxes import TextWord
    from app.schemas import TextLine

    if layer is None:
        return {}
    if not isinstance(layer, dict) or not isinstance(layer.get("lines", []), list):
        raise ProtocolError("malformed text layer")
    note = layer.get("note")
    if not layer.get("use"):
        return {"text_note": str(note)[:200] if note else None}
    lines = []
    for line in layer["lines"]:
        if not isinstance(line, dict) or not isinstance(line.get("words", []), list) or not all(
                isinstance(w, dict) for w in line.get("words", [])):
            raise ProtocolError("malformed text layer line")
        words = [TextWord(_quad(w.get("box"), scale), _word_text(w.get("text")), 1.0) for w in line.get("words", [])]
        if words:
            lines.append(TextLine(_quad(line.get("box"), scale), " ".join(w.text for w in words), 1.0, words))
    return {"text_layer": lines}


def _quad(box, scale: float) -> list:
    if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
        raise ProtocolError("malformed text layer box")
    x0, y0, x1, y1 = (float(v) * scale for v in box)
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def _word_text(text) -> str:
    if not isinstance(text, str) or not text or len(text) > _MAX_LAYER_TEXT:
        raise ProtocolError("malformed text layer word")
    return text


def page_pixels(header: dict, blob: bytes, max_side: int, max_pixels: int) -> np.ndarray:
    """The page's pixels, once its size, mode and length are what a page within budget has:
    a worker that a crafted file subverted can send anything."""
    width, height, mode = header.get("width"), header.get("height"), header.get("mode")
    channels = {"L": 1, "RGB": 3}.get(mode)
    sizes_ok = all(isinstance(side, int) and 0 < side <= max_side for side in (width, height))
    if channels is None or not sizes_ok or width * height > max_pixels or len(blob) != width * height * channels:
        raise ProtocolError(f"page of {width!r}x{height!r} {mode!r} with {len(blob)} bytes")
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.frombuffer(blob, dtype=np.uint8).reshape(shape)


class SharedPageBuffer:
    """Memory the parent and its worker both map, where the worker leaves a page's pixels.

    A page is megabytes: through the pipe it costs a copy into the kernel and one out, plus
    the parent's reads (load/cpu_cost.py). The parent creates it (an anonymous memfd, gone
    when both sides close it, whoever dies first) and passes the descriptor to the worker;
    the page frame then says how many bytes lie at its start. The parent copies them out at
    once, and only between the worker's answer and its next request, so the worker never
    writes a page the parent is reading. Whatever a subverted worker writes there is just
    bytes, checked like any page; its length can never pass the buffer's size.
    """

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self._map = mmap.mmap(fd, size)

    @classmethod
    def create(cls, size: int) -> Optional["SharedPageBuffer"]:
        if not hasattr(os, "memfd_create"):
            return None  # not Linux: pages come through the pipe
        fd = os.memfd_create("ocr-page", 0)  # inheritable only through Popen's pass_fds
        os.ftruncate(fd, size)
        return cls(fd, size)

    @classmethod
    def attach(cls, fd: int) -> Optional["SharedPageBuffer"]:
        """The worker's side; None where the buffer does not fit under its memory cap (the pipe then)."""
        try:
            return cls(fd, os.fstat(fd).st_size)
        except (OSError, ValueError):
            return None

    def write(self, pixels: bytes) -> Optional[int]:
        """Leaves the pixels at the start; None where they do not fit (they go through the pipe)."""
        if len(pixels) > self.size:
            return None
        self._map[:len(pixels)] = pixels
        return len(pixels)

    def read(self, length) -> bytes:
        if not isinstance(length, int) or not 0 <= length <= self.size:
            raise ProtocolError(f"shared page of {length!r} bytes in a buffer of {self.size}")
        return self._map[:length]

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


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
