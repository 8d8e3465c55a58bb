"""Turning a page upright, and mapping what the engine found on it back to the page as uploaded.

`rotation` is always the clockwise turn, in degrees (0, 90, 180, 270), that was applied to the
page as uploaded to make it upright. Coordinates are continuous (pixel edges: 0..width), so a
quarter turn maps a box exactly, with no off-by-one pixel.
"""

from __future__ import annotations

import numpy as np

ANGLES = (0, 90, 180, 270)


def turn(pixels: np.ndarray, rotation: int) -> np.ndarray:
    """The page turned clockwise by `rotation` degrees (HxW or HxWx3, contiguous)."""
    if rotation == 0:
        return pixels
    return np.ascontiguousarray(np.rot90(pixels, k=-(rotation // 90)))  # rot90 turns anticlockwise


def unturn_point(x: float, y: float, rotation: int, width: float, height: float) -> tuple[float, float]:
    """A point on the upright page, back on the page as uploaded (which is `width` x `height`)."""
    if rotation == 0:
        return x, y
    if rotation == 90:  # uploaded (u, v) went to (height - v, u)
        return y, height - x
    if rotation == 180:
        return width - x, height - y
    if rotation == 270:  # uploaded (u, v) went to (v, width - u)
        return width - y, x
    raise ValueError(f"rotation must be one of {ANGLES}, not {rotation!r}")


def turn_point(x: float, y: float, rotation: int, width: float, height: float) -> tuple[float, float]:
    """A point on a `width` x `height` page, where it lands once the page is turned by `rotation`."""
    if rotation == 0:
        return x, y
    if rotation == 90:
        return height - y, x
    if rotation == 180:
        return width - x, height - y
    if rotation == 270:
        return y, width - x
    raise ValueError(f"rotation must be one of {ANGLES}, not {rotation!r}")
