"""What a runner keeps of a job between its turns: the document in Ray's object store, read from the job
store once; and the decoder time the job has used against its client's quotas.max_decode_s, which is
kept in the job store, so that a runner taking the job over goes on from it.

The document lives in the runner's memory: a job taken over by another runner reads it once more there.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import ray

from app.errors import DecodeBudgetExceeded
from app.jobs.model import Job
from app.settings.jobs import Jobs


@dataclass
class PageFailure:
    """A page that could not be rendered or read, with the error the client will see for it, and the
    decoder time its failed attempts took (charged to the job: a page that times out costs the most)."""

    page_number: int
    error: dict
    cost_ms: float = 0.0


@dataclass
class DecodeCharge:
    """Decoder time spent on no page that came out of it (a stream that failed midway): charged all the same."""

    ms: float


class DocumentCache:
    """The documents of the jobs this runner works on or has between turns (at most jobs_per_runner), newest last."""

    def __init__(self, store, size: int, stats: dict):
        self._store, self._size, self._stats = store, size, stats
        self._documents: OrderedDict[str, ray.ObjectRef] = OrderedDict()

    async def get(self, job_id: str) -> Optional[ray.ObjectRef]:
        """The job's document in Ray's object store: from the cache, else read from the store once."""
        if job_id in self._documents:
            self._documents.move_to_end(job_id)
            return self._documents[job_id]
        document = await asyncio.to_thread(self._store.document, job_id)
        if document is None:
            return None
        self._stats["documents_read"] += 1
        self._documents[job_id] = ray.put(document)
        while len(self._documents) > self._size:
            self._documents.popitem(last=False)
        return self._documents[job_id]

    def drop(self, job_id: str) -> None:
        self._documents.pop(job_id, None)


class DecodeBudget:
    """Decoder milliseconds each job has used, in the job store, against its client's quotas.max_decode_s.
    Every page is charged, failed ones with the time their attempts took."""

    def __init__(self, jobs: Jobs, store):
        self._jobs, self._store = jobs, store

    def _limit_ms(self, job: Job) -> float:
        return self._jobs.quotas_for(job.client).max_decode_s * 1000

    async def exhausted(self, job: Job) -> bool:
        return await asyncio.to_thread(self._store.charge_decode, job.id, 0.0) > self._limit_ms(job)

    async def charge(self, job: Job, item):
        """The page as rendered, or its failure once the job has used its budget. A failure or a bare
        charge is returned as it is, after its time is charged."""
        if isinstance(item, DecodeCharge):
            ms = item.ms
        elif isinstance(item, PageFailure):
            ms = item.cost_ms
        else:
            ms = float(item.timings_ms.get("decode") or 0.0)
        spent = await asyncio.to_thread(self._store.charge_decode, job.id, ms)
        if isinstance(item, (DecodeCharge, PageFailure)) or spent <= self._limit_ms(job):
            return item
        return self.over(job, item.page_number)

    def over(self, job: Job, number: int) -> PageFailure:
        limit = self._jobs.quotas_for(job.client).max_decode_s
        return PageFailure(number, DecodeBudgetExceeded(f"The job used more than its quotas.max_decode_s={limit:g} s "
                                                        "of decoding; this page was not read.").record())
