"""The size and form in which a page reaches the engine: within its input budget, as RGB. Pure.

At the bottom of the layers: the engines declare their budget in it, the decoders fit pages to it,
the orientation step and the OCR replicas take pixels through `as_rgb`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class InputBudget:
    """The largest page the engine takes: a page is never decoded larger than it needs to be to fill it."""

    max_side: int
    max_pixels: int

    def scale(self, width: float, height: float) -> float:
        """The factor (<= 1) that brings a width x height page inside the budget."""
        return min(1.0, self.max_side / max(width, height), (self.max_pixels / (width * height)) ** 0.5)

    def fitted_size(self, width: int, height: int, scale: float) -> tuple[int, int]:
        """width x height scaled and rounded, then trimmed a pixel at a time where rounding both sides
        up took it past the budget (695x1444 is 60 pixels over 1,003,520: the sandbox refuses that page)."""
        size = [max(1, round(width * scale)), max(1, round(height * scale))]
        while (size[0] * size[1] > self.max_pixels or max(size) > self.max_side) and max(size) > 1:
            longer = 0 if size[0] >= size[1] else 1
            size[longer] -= 1
        return size[0], size[1]


def fit_to_budget(img: Image.Image, max_side: int, max_pixels: int) -> tuple[Image.Image, float]:
    """Downscale (never upscale) so the image fits the engine's input budget; returns the scale used.

    Pillow's bilinear filter, which when shrinking is a triangle filter as wide as the scale
    (antialiased, unlike OpenCV's): half Lanczos' cost, and PP-OCR scales its input
    bilinearly itself. reducing_gap: a whole factor first with a box filter (cheap), the
    filter over the last factor of at most 3 ("indistinguishable from fair resampling in most
    cases", Pillow's documentation)."""
    width, height = img.size
    scale = InputBudget(max_side, max_pixels).scale(width, height)
    if scale >= 1.0:
        return img, 1.0
    size = InputBudget(max_side, max_pixels).fitted_size(width, height, scale)
    return img.resize(size, Image.Resampling.BILINEAR, reducing_gap=3.0), scale


def as_rgb(pixels: np.ndarray) -> np.ndarray:
    """What the engines take: HxWx3 uint8. A grey page travels as one channel, a third of the bytes.
    Anything else is no page (ValueError): it must fail alone, before the engine, not inside it."""
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
        raise ValueError(f"a page is uint8 pixels, not {getattr(pixels, 'dtype', type(pixels))} "
                         f"{getattr(pixels, 'shape', '')}")
    if pixels.ndim == 2:
        return np.repeat(pixels[:, :, None], 3, axis=2)
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"a page is HxW or HxWx3 pixels, not {pixels.shape}")
    return pixels
