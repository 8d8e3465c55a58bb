"""How fast an OCR replica clears pages: seconds of busy time per page, a moving average.

The autoscaling policy (app/scaling/autoscaling.py) sizes the fleet from it, so the figure must be the
replica's real throughput, whatever its engine and its batching:
- busy time, not the sum of batch durations: with max_concurrent_batches > 1 batches overlap,
  and each wall-clock second counts once;
- per page, not per batch: a batch of 8 and a batch of 1 weigh what they carried;
- idle time never counts: a replica waiting for work is not a slow one.
Each finished batch is one sample: the busy seconds since the previous sample and the pages it
carried. Both sums decay by the same factor per sample (`alpha`), so the ratio follows the
last few dozen batches and a change of engine speed (a longer document, a hotter GPU) shows
within a few batches. Pure, and called from the replica's event loop only.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

METRIC = "seconds_per_page"  # the key in OCRModel.record_autoscaling_stats


class ServiceRate:
    def __init__(self, alpha: float = 0.2, clock: Callable[[], float] = time.monotonic):
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self._alpha, self._clock = alpha, clock
        self._running = 0
        self._mark = 0.0  # busy time before this instant is already in a sample
        self._busy: Optional[float] = None  # decayed busy seconds
        self._pages: Optional[float] = None  # decayed pages

    def batch_started(self) -> None:
        if self._running == 0:
            self._mark = self._clock()  # the replica was idle until now
        self._running += 1

    def batch_finished(self, pages: int) -> None:
        now = self._clock()
        busy, self._mark = now - self._mark, now
        self._running = max(0, self._running - 1)
        if pages <= 0:
            return  # nothing ran (every page was undecodable): the time stays out of the figure
        if self._busy is None:
            self._busy, self._pages = busy, float(pages)
        else:
            self._busy += self._alpha * (busy - self._busy)
            self._pages += self._alpha * (pages - self._pages)

    @property
    def running(self) -> int:
        """Batches started and not yet finished."""
        return self._running

    @property
    def seconds_per_page(self) -> Optional[float]:
        """None until a batch finished: the policy then falls back on batch capacity."""
        if not self._busy or not self._pages:
            return None
        return self._busy / self._pages
