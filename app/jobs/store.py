"""The store interface: everything a job is, kept outside every replica.

Both stores make each change atomic and idempotent:
- `create` with an idempotency key returns the job that key already made;
- `claim` gives a job to one runner at a time, under a lease that must be renewed;
- a page result is written once (`record_page` keyed by job and page): a page that completes
  twice, on two runners after a takeover, counts once; `done` and `failed` are counted from
  those rows, never incremented;
- nothing is written for a job that was deleted (a runner that missed the cancel cannot bring it back).

The methods block; async callers run them in a thread.
"""

from __future__ import annotations

import abc
from typing import Optional

from app.jobs.model import Job


class JobStore(abc.ABC):
    @abc.abstractmethod
    def create(self, job: Job, document: bytes, idempotency_key: Optional[str] = None) -> tuple[Job, bool]:
        """Store a queued job and its document; with a key already used by the same client, (that job, False)."""

    @abc.abstractmethod
    def get(self, job_id: str) -> Optional[Job]:
        """The job with its page counts, or None (never made, deleted or expired)."""

    @abc.abstractmethod
    def claim(self, owner: str, lease_s: float) -> Optional[Job]:
        """The oldest unfinished job whose lease is free or lapsed, now leased to `owner`."""

    @abc.abstractmethod
    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        """Extend `owner`'s lease; False when the job is gone, finished or leased to another runner."""

    @abc.abstractmethod
    def release(self, job_id: str, owner: str) -> None:
        """Give the lease up at once (a runner stopping cleanly), so another runner need not wait for it."""

    @abc.abstractmethod
    def document(self, job_id: str) -> Optional[bytes]:
        """The uploaded bytes, or None once the job is gone."""

    @abc.abstractmethod
    def record_page(self, job_id: str, page_number: int, result: Optional[dict] = None,
                    error: Optional[dict] = None) -> bool:
        """Write a page's result (or its final error) once; True if this call wrote it."""

    @abc.abstractmethod
    def recorded_pages(self, job_id: str) -> set[int]:
        """Page numbers with a result or a final error."""

    @abc.abstractmethod
    def results(self, job_id: str) -> dict[int, dict]:
        """page number -> {"result": page body} or {"error": error body}."""

    @abc.abstractmethod
    def finish(self, job_id: str, owner: Optional[str], status: str, ttl_s: float, error: Optional[dict] = None,
               engine: Optional[dict] = None) -> bool:
        """End the job (its lease holder only, unless owner is None); its data expires ttl_s later."""

    @abc.abstractmethod
    def delete(self, job_id: str) -> bool:
        """Remove the job and all its data; True if it existed."""

    @abc.abstractmethod
    def purge_expired(self) -> int:
        """Delete finished jobs past their expiry; how many went."""

    @abc.abstractmethod
    def unfinished_counts(self) -> dict[str, int]:
        """{"queued": n, "running": m}: the jobs not yet ended (the ocr_jobs gauge)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the store cannot be reached."""

    def close(self) -> None:
        pass


def open_store(jobs) -> JobStore:
    """The store named by `jobs.store` (app.config.Jobs)."""
    url = jobs.store
    if not url:
        raise ValueError("jobs.store is not set")
    if url.startswith("sqlite:///"):
        from app.jobs.sqlite_store import SQLiteJobStore

        return SQLiteJobStore(url[len("sqlite://"):])
    from app.jobs.redis_store import RedisJobStore

    return RedisJobStore(url, password_file=jobs.redis_password_file, require_aof=jobs.require_aof)
