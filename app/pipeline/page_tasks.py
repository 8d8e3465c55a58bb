"""A document's pages in flight: the one fan-out and cancel, for requests (app/pipeline/document_reader.py)
and jobs (app/jobs/runner.py) alike.

Each page's work starts as a task as soon as the page comes from the Preprocessor, so page 1 is read
while page 2 still rasterises; a job bounds how many are in flight at once (`jobs.max_inflight_pages`).
Leaving the document for any reason (a page failed for good, the client went away, a job's turn was
cancelled) cancels every page still in flight: no page is read for nobody.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional


class PageTasks:
    """Use as `with PageTasks() as pages:`; the pages still running on leaving are cancelled."""

    def __init__(self, limit: Optional[int] = None):
        self._tasks: list[asyncio.Task] = []
        self._slots = asyncio.Semaphore(limit) if limit else None

    def __enter__(self) -> "PageTasks":
        return self

    def __exit__(self, *_) -> None:
        self.cancel()

    async def start(self, work: Awaitable) -> asyncio.Task:
        """`work` as a task of its own; with a limit, once one of the limit's slots is free (a slot is
        free again when its task ends, however it ends)."""
        if self._slots is not None:
            await self._slots.acquire()
        task = asyncio.ensure_future(work)
        if self._slots is not None:
            task.add_done_callback(lambda _: self._slots.release())
        self._tasks.append(task)
        return task

    def failure(self) -> Optional[BaseException]:
        """The error of the first page (in the order started) that has failed, or None."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    async def results(self) -> list[Any]:
        """Every page's result, in the order started, once all are done; the first failure is raised as
        soon as it happens (the others are cancelled on leaving)."""
        if self._tasks:
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
        failure = self.failure()
        if failure is not None:
            raise failure
        return [task.result() for task in self._tasks]

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
