"""A page's outcome written to the job store: a store that blinks is tried again rather than losing the page;
a full store is not (the job stops and the runner pauses its claims: app/jobs/runner.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from app.errors import InsufficientStorage
from app.jobs.model import job_tag
from app.jobs.store import JobStore
from app.ops import metrics
from app.pipeline.retry import backoff_s

logger = logging.getLogger("ray.serve")
ATTEMPTS = 6


async def record_page(store: JobStore, job_id: str, number: int, result: Optional[dict],
                      error: Optional[dict]) -> None:
    for attempt in range(ATTEMPTS):
        try:
            if await asyncio.to_thread(store.record_page, job_id, number, result, error):
                metrics.inc("ocr_job_pages_total", outcome="failed" if error else "ok")
            return
        except InsufficientStorage:
            raise  # no retry: the job stops and the runner pauses
        except Exception:
            if attempt == ATTEMPTS - 1:
                raise
            logger.warning("job %s page %d: the store did not take the result; trying again", job_tag(job_id), number)
            await asyncio.sleep(backoff_s(attempt))
