"""Hostile documents, built in code: the files that took the service down, and a seeded fuzzer.

Nothing here is stored as a binary fixture; every case is made from a few lines of
PDF or PNG syntax, so a reader can see what each one claims and why it hurts.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Optional

from PIL import Image

from app.synthetic import png_bytes, render_text_page


def pdf_from_objects(objects: list[bytes]) -> bytes:
    """A PDF with a correct xref table from object bodies numbered 1..n; object 1 is the catalog."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _stream(dictionary: bytes, content: bytes) -> bytes:
    return b"<< " + dictionary + b" /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"


def _one_page_pdf(page_content: bytes, xobjects: list[bytes], page_xobjects: bytes) -> bytes:
    """Catalog, pages, one page drawing `page_content` with forms numbered from object 5."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /XObject << " + page_xobjects + b" >> >> >>",
        _stream(b"", page_content),
        *xobjects,
    ]
    return pdf_from_objects(objects)


def self_drawing_form_pdf(draws: int = 2) -> bytes:
    """One page drawing a Form XObject that draws itself `draws` times: unbounded recursion in the renderer."""
    form = _stream(
        b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /Fx 5 0 R >> >>",
        b"q 0.5 0 0 0.5 10 10 cm " + b"/Fx Do " * draws + b"Q",
    )
    return _one_page_pdf(b"/Fx Do", [form], b"/Fx 5 0 R")


def fan_out_forms_pdf(levels: int = 7, fan_out: int = 10) -> bytes:
    """Forms nested `levels` deep, each drawing the next `fan_out` times: fan_out**levels draws of a path."""
    forms = []
    for level in range(levels):
        number = 5 + level
        if level == levels - 1:
            content, resources = b"0 0 m 600 780 l S 10 10 500 700 re f", b""
        else:
            content = b"/F Do " * fan_out
            resources = b"/Resources << /XObject << /F %d 0 R >> >>" % (number + 1)
        forms.append(_stream(b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] " + resources, content))
    return _one_page_pdf(b"/F Do", forms, b"/F 5 0 R")


def png_chunk(kind: bytes, data: bytes, crc: Optional[int] = None) -> bytes:
    crc = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc & 0xFFFFFFFF)


def apng_frame_bomb(frames: int = 2**31) -> bytes:
    """A small valid PNG whose acTL chunk claims `frames` animation frames."""
    plain = png_bytes(Image.new("L", (64, 32), 255))
    signature, rest = plain[:8], plain[8:]
    ihdr_len = struct.unpack(">I", rest[:4])[0]
    ihdr, tail = rest[: 12 + ihdr_len], rest[12 + ihdr_len :]
    actl = png_chunk(b"acTL", struct.pack(">II", frames, 0))
    fctl = png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, 64, 32, 0, 0, 1, 10, 0, 0))
    return signature + ihdr + actl + fctl + tail


def tiff_bytes(pages: int = 2, size: tuple[int, int] = (300, 120)) -> bytes:
    images = [render_text_page([f"Frame {i + 1}"], width=size[0], font_size=30) for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="TIFF", save_all=True, append_images=images[1:])
    return buffer.getvalue()


def damaged_tiffs() -> dict[str, bytes]:
    """The four TIFFs that once escaped as 500s: cut short, and a next-IFD offset that lies."""
    tiff = tiff_bytes()
    first_ifd = struct.unpack("<I", tiff[4:8])[0]
    entries = struct.unpack("<H", tiff[first_ifd : first_ifd + 2])[0]
    next_ifd_at = first_ifd + 2 + entries * 12

    def with_next_ifd(value: int) -> bytes:
        return tiff[:next_ifd_at] + struct.pack("<I", value) + tiff[next_ifd_at + 4 :]

    return {
        "tiff-cut-50": tiff[: len(tiff) // 2],
        "tiff-cut-99": tiff[: len(tiff) * 99 // 100],
        "tiff-ifd-past-end": with_next_ifd(len(tiff) + 10_000),
        "tiff-ifd-garbage": with_next_ifd(len(tiff) // 3 + 1),
    }
