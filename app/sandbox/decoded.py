"""A page as a decoder hands it on: what documents.py (images) and pdf_pages.py (PDFs) both make."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from PIL import Image


@dataclass
class DecodedPage:
    # Upright: a Pillow image of mode L or RGB, or, for a rendered PDF page, HxWx3 uint8 RGB
    # pixels as PDFium left them (Pillow's conversions in and out cost half a render).
    content: Image.Image | np.ndarray
    page_number: int  # 1-based
    dpi: Optional[float] = None  # a PDF page's resolution: the coordinate space of its boxes
    # The page as uploaded (a PDF page rendered at `dpi`), where the content was decoded or
    # rendered smaller than that to fit the engine's budget; None when it is `size`.
    source_size: Optional[tuple[int, int]] = None
    text_layer: object = None  # a PDF page's LayerVerdict (app/sandbox/pdf_text.py); None: no text, or not asked

    @property
    def image(self) -> Image.Image:
        if isinstance(self.content, np.ndarray):
            return Image.fromarray(self.content, "RGB")
        return self.content

    @property
    def size(self) -> tuple[int, int]:
        if isinstance(self.content, np.ndarray):
            return self.content.shape[1], self.content.shape[0]
        return self.content.size

    @property
    def source(self) -> tuple[int, int]:
        return self.source_size or self.size
