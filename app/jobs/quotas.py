"""What one client may hold in the job store, and the refusal that names the limit it hit.

The stores count a client's usage and compare it inside the same atomic step that creates
the job (one SQLite transaction, one Redis script), so concurrent submits of one client
cannot overshoot a quota together. The messages are built here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import InsufficientStorage, QuotaExceeded
from app.settings.jobs import JobQuotas

QUOTA_NAMES = ("max_queued_jobs", "max_queued_pages", "max_stored_bytes")
_WHAT = {"max_queued_jobs": "unfinished jobs", "max_queued_pages": "pages in unfinished jobs",
         "max_stored_bytes": "bytes in the job store"}


@dataclass(frozen=True)
class Admission:
    """The limits one submit is checked against."""

    quotas: JobQuotas
    max_store_bytes: int
    min_free_bytes: int = 0  # free space kept on the SQLite store's disk

    def limit(self, name: str) -> int:
        return getattr(self.quotas, name)


@dataclass(frozen=True)
class Usage:
    jobs: int = 0  # unfinished
    pages: int = 0  # of the unfinished jobs
    bytes: int = 0  # documents and results, finished jobs included until they expire


def first_exceeded(usage: Usage, pages: int, size: int, admission: Admission) -> tuple[str, int] | None:
    """(quota name, the client's usage of it) for the first quota the new job would pass, or None."""
    for name, used, adding in (("max_queued_jobs", usage.jobs, 1), ("max_queued_pages", usage.pages, pages),
                               ("max_stored_bytes", usage.bytes, size)):
        if used + adding > admission.limit(name):
            return name, used
    return None


def quota_exceeded(client: str, name: str, used: int, admission: Admission) -> QuotaExceeded:
    return QuotaExceeded(f"Client {client!r} holds {used} {_WHAT[name]}; this job would pass its quota "
                         f"jobs.quotas.{name}={admission.limit(name)}. Retry when earlier jobs have finished "
                         f"or were deleted.", code="quota_exceeded")


def store_full(detail: str) -> InsufficientStorage:
    return InsufficientStorage(f"The job store is full ({detail}); nothing was stored. Retry once finished jobs "
                               "have expired or been deleted.", code="insufficient_storage")
