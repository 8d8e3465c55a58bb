"""A page's outcome written to the job store: a store that blinks is tried again rather than losing the page;
a full store is not (the job stops and the runner pauses its claims: app/jobs/runner.py)."""

from __future__ import annotations

import asyncio
from typing import Optional

from app.errors import InsufficientStorage
from app.jobs.model import job_tag
from app.jobs.store import JobStore
from app.ops import metrics
from app.pipeline.retry import retry_page

ATTEMPTS = 6


async def record_page(store: JobStore, job_id: str, number: int, result: Optional[dict],
                      error: Optional[dict]) -> None:
    async def once() -> None:
        if await asyncio.to_thread(store.record_page, job_id, number, result, error):
            metrics.inc("ocr_job_pages_total", outcome="failed" if error else "ok")

    await retry_page(once, ATTEMPTS - 1, f"job {job_tag(job_id)} page {number}: the store did not take the result",
                     retryable=lambda exc: not isinstance(exc, InsufficientStorage))  # full: the job stops
