"""Rendered text pages with known content: the warm-up input, and test fixtures."""

from __future__ import annotations

import io
from typing import Iterable

from PIL import Image, ImageDraw, ImageFont

WARMUP_LINES = ("Warm-up page 0123456789", "The quick brown fox jumps over the lazy dog")


def render_text_page(
    lines: tuple[str, ...] | list[str] = WARMUP_LINES,
    width: int = 1000,
    font_size: int = 36,
    margin: int = 40,
    columns: int = 1,
) -> Image.Image:
    """Black text on white, one line per entry; with columns=2 the lines are split into two columns."""
    font = ImageFont.load_default(size=font_size)
    line_height = int(font_size * 1.8)
    per_column = -(-len(lines) // columns)
    height = margin * 2 + line_height * max(1, per_column)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    column_width = (width - margin * 2) // columns
    for i, text in enumerate(lines):
        column, row = divmod(i, per_column)
        draw.text((margin + column * column_width, margin + row * line_height), text, fill="black", font=font)
    return image


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pdf_bytes(images: Iterable[Image.Image], dpi: int = 100) -> bytes:
    """A PDF of the pages; a generator is drawn one page at a time (long documents stay small)."""
    pages = iter(images)
    buffer = io.BytesIO()
    next(pages).save(buffer, format="PDF", save_all=True, append_images=pages, resolution=dpi)
    return buffer.getvalue()
