"""What the Preprocessor does with a page's orientation: the request's mode, and the page turned.

Modes (settings `orientation`, or a request's `orientation` field, which wins):
- `auto`: find the rotation (finder.py) and turn the page upright;
- `off`: leave the page as it came;
- `0`, `90`, `180`, `270`: turn every page clockwise by that many degrees (the client knows).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from app.errors import BadRequest
from app.orientation.geometry import ANGLES, turn

logger = logging.getLogger("ray.serve")

MODES = ("auto", "off") + tuple(str(angle) for angle in ANGLES)


def parse_mode(value: Optional[str]) -> Optional[str]:
    """A request's `orientation` field, checked; None when the request did not set one."""
    if value is None:
        return None
    mode = value.strip().lower()
    if mode not in MODES:
        raise BadRequest(f"orientation must be one of {', '.join(MODES)}; got {value[:40]!r}.", code="bad_request")
    return mode


@dataclass(frozen=True)
class Orientation:
    rotation: int  # clockwise degrees applied to the page as uploaded
    confidence: Optional[float]  # the finder's, in auto mode; None when the rotation was not found but given
    ms: float  # time spent finding and turning
    look: str = "given"  # the finder's look that settled it (first, read, full, blank); "given" when not looked for


LEFT_AS_UPLOADED = Orientation(0, None, 0.0, "off")  # mode off: nothing looked for, nothing turned


class Orienter:
    """One per Preprocessor replica. The finder's models load on first use in `auto` (or at start,
    when `auto` is the default), so a service set to `off` never loads them."""

    def __init__(self, default_mode: str):
        self.default_mode = default_mode
        self._finder = None
        self._lock = threading.Lock()
        if default_mode == "auto":
            self._get_finder()

    def set_default_mode(self, mode: str) -> None:
        """The Preprocessor's reconfigure(): the mode for requests that name none."""
        if mode == "auto":
            self._get_finder()
        self.default_mode = mode

    def _get_finder(self):
        with self._lock:
            if self._finder is None:
                from app.orientation.finder import OrientationFinder

                self._finder = OrientationFinder()
            return self._finder

    def is_off(self, mode: Optional[str]) -> bool:
        return (mode or self.default_mode) == "off"

    def upright(self, pixels: np.ndarray, mode: Optional[str]) -> tuple[np.ndarray, Orientation]:
        """The page turned upright, and what was done. Runs in a worker thread (CPU-bound)."""
        start = time.perf_counter()
        if self.is_off(mode):
            return pixels, LEFT_AS_UPLOADED
        mode = mode or self.default_mode
        if mode == "auto":
            try:
                finding = self._get_finder().find(pixels)
            except Exception:  # the finder is an aid: a page it cannot judge is read as it came
                logger.exception("orientation finder failed; the page is read as uploaded")
                return pixels, Orientation(0, 0.0, _ms(start), "failed")
            rotation, confidence, look = finding.rotation, finding.confidence, finding.look
        else:
            rotation, confidence, look = int(mode), None, "given"
        return turn(pixels, rotation), Orientation(rotation, confidence, _ms(start), look)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)
