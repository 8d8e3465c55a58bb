"""`GET /v1/jobs/{id}/result?format=pdf`: a kept document made searchable, under the uploads' budgets.

Each render loads the kept document (up to jobs.max_upload_bytes) into the ingress and holds a
decoder while it writes, so it is admitted as an upload is: one of the client's `max_uploads` slots
and the replica's, and its bytes (the document and the PDF written from it) reserved against
jobs.max_upload_buffer_bytes before a byte is read. One render per job at a time on a replica; the
others wait for it and get what it wrote, which is kept (a finished job's results do not change) in a
small cache, so forty calls on one job cost one decoder once.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from contextlib import ExitStack
from typing import Awaitable, Callable, Optional

from fastapi.responses import Response

from app.errors import Conflict
from app.formats import MEDIA_TYPES
from app.jobs.model import Job


class RenderedCache:
    """Rendered PDFs by job id, newest kept, within `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.held = max_bytes, 0
        self._pdfs: OrderedDict[str, bytes] = OrderedDict()

    def get(self, job_id: str) -> Optional[bytes]:
        pdf = self._pdfs.get(job_id)
        if pdf is not None:
            self._pdfs.move_to_end(job_id)
        return pdf

    def put(self, job_id: str, pdf: bytes) -> None:
        if len(pdf) > self.max_bytes:
            return
        self.drop(job_id)
        self._pdfs[job_id], self.held = pdf, self.held + len(pdf)
        while self.held > self.max_bytes:
            _, old = self._pdfs.popitem(last=False)
            self.held -= len(old)

    def drop(self, job_id: str) -> None:
        old = self._pdfs.pop(job_id, None)
        if old is not None:
            self.held -= len(old)


class SearchableRenders:
    def __init__(self, uploads, buffered, cache_bytes: int):
        self._uploads, self._buffered = uploads, buffered  # app/http/job_slots.py's Holders and ByteBudget
        self._cache = RenderedCache(cache_bytes)
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: Counter[str] = Counter()  # calls holding or waiting for each job's lock
        self.renders = 0  # renders started on this replica (tests, /v1/info)

    async def answer(self, job: Job, client: str, client_uploads: int, size: Optional[int],
                     render: Callable[[], Awaitable[bytes]]) -> Response:
        """The job's searchable PDF; `size`: its kept document's bytes (None: not kept); `render` loads
        the document and writes the PDF."""
        pdf = self._cache.get(job.id)
        if pdf is None:
            if size is None:
                raise Conflict("The searchable PDF needs the job's document, which is not kept once a job ends: "
                               "submit with keep_document=true to have it.", code="document_not_kept")
            with ExitStack() as held:  # refused (429/503) before anything is read
                held.enter_context(self._uploads.hold(client, client_uploads))
                held.enter_context(self._buffered.reserve(2 * size))  # the document, and the PDF about its size
                pdf = await self._render_once(job.id, render)
        return Response(pdf, media_type=MEDIA_TYPES["pdf"])

    async def _render_once(self, job_id: str, render: Callable[[], Awaitable[bytes]]) -> bytes:
        lock = self._locks.setdefault(job_id, asyncio.Lock())
        self._users[job_id] += 1
        try:
            async with lock:
                pdf = self._cache.get(job_id)  # written while this call waited
                if pdf is None:
                    self.renders += 1
                    pdf = await render()
                    self._cache.put(job_id, pdf)
                return pdf
        finally:
            self._users[job_id] -= 1
            if not self._users[job_id]:  # the last one out: no lock kept for a job nobody renders
                del self._users[job_id]
                self._locks.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        """A deleted job's PDF goes with it."""
        self._cache.drop(job_id)
