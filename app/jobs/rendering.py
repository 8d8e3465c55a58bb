"""A job's turn, rendered: its pages from the Preprocessor as they come, each that cannot be
rendered retried alone and, past its retries, a PageFailure the runner records (app/jobs/runner.py)."""

from __future__ import annotations

import time
from itertools import groupby
from typing import AsyncIterator, Callable

import ray
from ray.serve.handle import DeploymentHandle

from app.errors import to_error
from app.jobs.model import Job, job_tag
from app.jobs.turns import DecodeCharge, PageFailure
from app.pipeline.retry import retry_page


def page_spec(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3,7': the `pages` parameter the Preprocessor understands."""
    runs = [[n for _, n in run] for _, run in groupby(enumerate(numbers), key=lambda item: item[1] - item[0])]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


class TurnRenderer:
    def __init__(self, preprocessor: DeploymentHandle, page_retries: int, on_retry: Callable[[], None]):
        self._pre = preprocessor.options(stream=True)
        self._retries = page_retries
        self._on_retry = on_retry

    async def pages(self, job: Job, document: ray.ObjectRef, numbers: list[int]) -> AsyncIterator:
        """The pages of one turn as they render. A stream that fails is retried page by page, so one
        bad page fails alone; a page that fails alone is retried on retryable errors, then reported.
        The time a failure took (waiting on the decoder, not on the runner) is charged to the job: a
        DecodeCharge for a stream that failed midway, a PageFailure's cost_ms for a page alone."""
        seen: set[int] = set()
        # Logs name the job by a hash of its id: where keys are off, the id is the job's only secret.
        stream = self._pre.prepare.remote(job_tag(job.id), document, job.content_type, page_spec(numbers),
                                          job.page_options(), max_pages=len(numbers))
        while True:
            asked = time.monotonic()
            try:
                payload = await stream.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:
                spent_ms = (time.monotonic() - asked) * 1000
                if len(numbers) == 1:
                    yield await self._alone(job, document, numbers[0], exc, spent_ms)
                    return
                yield DecodeCharge(spent_ms)
                break
            seen.add(payload.page_number)
            yield payload
        for number in numbers:
            if number not in seen:
                async for item in self.pages(job, document, [number]):
                    yield item

    async def _alone(self, job: Job, document: ray.ObjectRef, number: int, first: Exception, spent_ms: float):
        """The page rendered on its own, after `first` failed it within its turn's stream: retried by the one
        rule (app/pipeline/retry.py), and past it a PageFailure charged every attempt's time."""
        last, spent = first, spent_ms

        async def once():
            nonlocal last, spent
            asked = time.monotonic()
            try:
                async for payload in self._pre.prepare.remote(job_tag(job.id), document, job.content_type,
                                                             str(number), job.page_options()):
                    return payload
            except Exception as exc:
                last = exc
                raise
            finally:
                spent += (time.monotonic() - asked) * 1000
            raise last  # no page came: the last error stands

        try:
            return await retry_page(once, self._retries, f"job {job_tag(job.id)} page {number}",
                                    on_retry=self._on_retry, failed=first)
        except Exception as exc:
            return PageFailure(number, to_error(exc, job.id).record(), cost_ms=spent)
