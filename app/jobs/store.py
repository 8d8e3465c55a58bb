"""The store interface: everything a job is, kept outside every replica.

Both stores make each change atomic and idempotent:
- `create` with an idempotency key returns the job that key already made;
- `claim` gives a job to one runner at a time, under a lease that must be renewed;
- a page result is written once (`record_page` keyed by job and page): a page that completes
  twice, on two runners after a takeover, counts once; `done` and `failed` are counted from
  those rows, never incremented;
- nothing is written for a job that was deleted (a runner that missed the cancel cannot bring it back);
- a submit is checked against its client's quotas and the store's cap in the same atomic step
  that creates it (app/jobs/quotas.py), and a full store or disk raises InsufficientStorage
  (507) with the store left usable;
- claims take turns between clients: the client served longest ago goes first, so one client's
  backlog cannot hold another client's job (the runner gives a job back after each turn).

The methods block; async callers run them in a thread.
"""

from __future__ import annotations

import abc
import time
from typing import Optional

from app.errors import JobExpired
from app.jobs.model import FAILED, Job
from app.jobs.quotas import Admission


class DocumentLost(Exception):
    """The job exists but its document does not (all of it, or a chunk): the job cannot go on."""


class JobStore(abc.ABC):
    @abc.abstractmethod
    def create(self, job: Job, document: bytes, idempotency_key: Optional[str] = None,
               admission: Optional[Admission] = None) -> tuple[Job, bool]:
        """Store a queued job and its document; with a key already used by the same client, (that job, False).
        With `admission`, raise QuotaExceeded or InsufficientStorage instead of passing its limits."""

    @abc.abstractmethod
    def get(self, job_id: str) -> Optional[Job]:
        """The job with its page counts, or None (never made, deleted or expired)."""

    @abc.abstractmethod
    def claim(self, owner: str, lease_s: float) -> Optional[Job]:
        """An unfinished job whose lease is free or lapsed, now leased to `owner`: of the client whose last
        claim is oldest (never claimed: first), that client's oldest such job."""

    @abc.abstractmethod
    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        """Extend `owner`'s lease; False when the job is gone, finished or leased to another runner."""

    @abc.abstractmethod
    def release(self, job_id: str, owner: str) -> None:
        """Give the lease up at once (a runner stopping cleanly), so another runner need not wait for it."""

    @abc.abstractmethod
    def document(self, job_id: str) -> Optional[bytes]:
        """The uploaded bytes, or None once the job is gone; DocumentLost if the job is there but its bytes are not."""

    @abc.abstractmethod
    def charge_decode(self, job_id: str, ms: float) -> float:
        """Add `ms` of decoder time to the job's account (0: only read it); the total. Kept in the store,
        so that a runner taking the job over goes on from what the last one spent."""

    @abc.abstractmethod
    def document_size(self, job_id: str) -> Optional[int]:
        """The kept document's size in bytes, without reading it; None if none is kept."""

    @abc.abstractmethod
    def record_page(self, job_id: str, page_number: int, result: Optional[dict] = None,
                    error: Optional[dict] = None) -> bool:
        """Write a page's result (or its final error) once; True if this call wrote it."""

    @abc.abstractmethod
    def recorded_pages(self, job_id: str) -> set[int]:
        """Page numbers with a result or a final error."""

    @abc.abstractmethod
    def recorded_order(self, job_id: str) -> list[tuple[int, bool]]:
        """(page number, read: False for a final error) for the pages recorded so far, in the order they were
        recorded, each once: a job's event stream."""

    @abc.abstractmethod
    def results(self, job_id: str) -> dict[int, dict]:
        """page number -> {"result": page body} or {"error": error body}."""

    @abc.abstractmethod
    def finish(self, job_id: str, owner: Optional[str], status: str, ttl_s: float, error: Optional[dict] = None,
               engine: Optional[dict] = None) -> bool:
        """End the job (its lease holder only, unless owner is None); its data expires ttl_s later."""

    @abc.abstractmethod
    def claim_callback(self, hold_s: float) -> Optional[Job]:
        """A finished job whose callback is due, held for `hold_s` so that no other runner delivers it meanwhile."""

    @abc.abstractmethod
    def record_callback(self, job_id: str, state: dict, due: Optional[float]) -> None:
        """A delivery's outcome; `due`: when to try again (epoch seconds), None when done for good."""

    @abc.abstractmethod
    def delete(self, job_id: str) -> bool:
        """Remove the job and all its data; True if it existed."""

    @abc.abstractmethod
    def purge_expired(self) -> int:
        """Delete finished jobs past their expiry; how many went."""

    @abc.abstractmethod
    def unfinished_created_before(self, cutoff: float) -> list[str]:
        """Ids of unfinished jobs submitted before the epoch time `cutoff`."""

    def expire_unfinished(self, max_age_s: float, ttl_s: float) -> int:
        """Fail the jobs still unfinished `max_age_s` after their submit (jobs.max_unfinished_age_s)."""
        error = JobExpired(f"The job did not finish within jobs.max_unfinished_age_s={max_age_s:g} s of its "
                           "submit.").record()
        return sum(self.finish(job_id, None, FAILED, ttl_s, error)
                   for job_id in self.unfinished_created_before(time.time() - max_age_s))

    @abc.abstractmethod
    def unfinished_counts(self) -> dict[str, int]:
        """{"queued": n, "running": m}: the jobs not yet ended (the ocr_jobs gauge)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the store cannot be reached."""

    def close(self) -> None:
        pass


def admission(jobs, client: str) -> Admission:
    return Admission(jobs.quotas_for(client), jobs.max_store_bytes, jobs.min_free_bytes)
