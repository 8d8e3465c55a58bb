"""The one retry rule for a page, in synchronous requests and jobs alike, and the one retry loop.

OCR and postprocessing of a page are idempotent, so a call that failed with a retryable error
(its replica or the worker under it died, a stage was overloaded or out of memory) is sent
again, after a short backoff; Serve's router picks a replica. Any other failure, and the last
retryable one, go on as they are (`to_error` maps them for the client). Requests retry a page
`page_retries` times, jobs `jobs.page_retries` times: the same rule, counted apart, since a
job has no client waiting to retry it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional, TypeVar

from app.errors import to_error, unwrap

logger = logging.getLogger("ray.serve")
T = TypeVar("T")


def backoff_s(attempt: int, base_s: float = 0.25) -> float:
    """The wait before retry `attempt` (0-based): doubling from `base_s`, at most 8 s."""
    return min(base_s * 2 ** attempt, 8.0)


async def retry_page(call: Callable[[], Awaitable[T]], retries: int, what: str, base_s: float = 0.25,
                     on_retry: Callable[[], None] = lambda: None,
                     retryable: Optional[Callable[[Exception], bool]] = None,
                     failed: Optional[Exception] = None) -> T:
    """Run `call()`; after a retryable error run it again, at most `retries` more times, and raise the
    last error once they are spent. The service's one retry loop: a page through the stages, a job's
    page rendered alone, a page's outcome written to the store.

    `retryable` decides which errors are worth another try (default: the taxonomy's `retryable`);
    `failed` is the error of a first attempt the caller already made (the page then has `retries`
    calls left, the first after the first backoff)."""
    retryable = retryable or (lambda exc: to_error(exc, log=False).retryable)
    for attempt in range(retries + 1):
        if failed is None:
            try:
                return await call()
            except Exception as exc:
                failed = exc
        if attempt == retries or not retryable(failed):
            raise failed
        logger.warning("%s: %s (%s); sending it again", what, to_error(failed, log=False).code,
                       type(unwrap(failed)).__name__)
        on_retry()
        await asyncio.sleep(backoff_s(attempt, base_s))  # let the router learn the replica is gone
        failed = None
    raise AssertionError("unreachable")
