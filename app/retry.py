"""Sending a page again when the replica that held it died.

OCR and postprocessing of a page are idempotent, so a call that failed only because
its replica (or the worker under it) is gone is sent once more; Serve's router picks
another replica. Any other failure, and a second loss, go to the client as they are
(`to_error` maps a loss to a retryable 503 `stage_unavailable`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, TypeVar

from app.errors import is_replica_loss, unwrap

logger = logging.getLogger("ray.serve")
T = TypeVar("T")


async def retry_on_replica_loss(call: Callable[[], Awaitable[T]], retries: int, what: str,
                                backoff_s: float = 0.2) -> T:
    """Run `call()`; after a replica loss run it again, at most `retries` more times."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except Exception as exc:
            if attempt == retries or not is_replica_loss(exc):
                raise
            logger.warning("%s: a replica was lost (%s); sending it again", what, type(unwrap(exc)).__name__)
            await asyncio.sleep(backoff_s * (attempt + 1))  # let the router learn the replica is gone
    raise AssertionError("unreachable")
