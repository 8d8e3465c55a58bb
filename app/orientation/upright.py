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

from app.errors import one_of
from app.orientation.geometry import ANGLES, turn

logger = logging.getLogger("ray.serve")

MODES = ("auto", "off") + tuple(str(angle) for angle in ANGLES)


def parse_mode(value: Optional[str]) -> Optional[str]:
    """A request's `orientation` field, checked; None when the request did not set one."""
    return one_of(value, MODES, "orientation")


@dataclass(frozen=True)
class Orientation:
    rotation: int  # clockwise degrees applied to the page as uploaded
    confidence: Optional[float]  # the finder's, in auto mode; None when the rotation was not found but given
    ms: float  # time spent finding and turning
    look: str = "given"  # the finder's look that settled it (first, read, full, blank); "given" when not looked for;
    # "mixed" or "unsure" where a turn was found but the page's lines did not back it (read as uploaded)
    proposed: int = 0  # that turn, which was not made

    @property
    def note(self) -> Optional[str]:
        """What the response says of a page read as uploaded because its direction was in doubt."""
        if self.look == "mixed":
            return f"orientation: text runs several ways; read as uploaded (a turn of {self.proposed} was not backed)"
        if self.look == "unsure":
            return f"orientation: direction unsure; read as uploaded (a turn of {self.proposed} was not backed)"
        return None


LEFT_AS_UPLOADED = Orientation(0, None, 0.0, "off")  # mode off: nothing looked for, nothing turned


class Orienter:
    """One per Preprocessor replica. The finder's models load on first use in `auto` (or at start,
    when `auto` is the default), so a service set to `off` never loads them."""

    def __init__(self, default_mode: str, min_share: float):
        self.default_mode = default_mode
        self.min_share = min_share
        self._finder = None
        self._lock = threading.Lock()
        if default_mode == "auto":
            self._get_finder()

    def set_default_mode(self, mode: str, min_share: float) -> None:
        """The Preprocessor's reconfigure(): the mode for requests that name none, and the share of a
        page's lines that must back a turn."""
        self.min_share = min_share
        if self._finder is not None:
            self._finder.min_share = min_share
        if mode == "auto":
            self._get_finder()
        self.default_mode = mode

    def _get_finder(self):
        with self._lock:
            if self._finder is None:
                from app.orientation.finder import OrientationFinder

                self._finder = OrientationFinder(min_share=self.min_share)
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
            turned = Orientation(finding.rotation, finding.confidence, _ms(start), finding.look, finding.proposed)
        else:
            turned = Orientation(int(mode), None, _ms(start), "given")
        return turn(pixels, turned.rotation), turned


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)
