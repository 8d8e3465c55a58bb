"""A job's record, what a client sees of it, and how a finished job is judged."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

from app.errors import PageNotProcessed
from app.schemas import PageOptions

QUEUED, RUNNING, SUCCEEDED, PARTIAL, FAILED, CANCELED = "queued", "running", "succeeded", "partial", "failed", "canceled"
FINISHED = (SUCCEEDED, PARTIAL, FAILED, CANCELED)
CALLBACK_PENDING = {"status": "pending", "attempts": 0}  # a finished job's callback before its first delivery


@dataclass
class Job:
    id: str
    status: str = QUEUED
    client: str = "-"  # the API key's name that submitted it; other clients get 404
    content_type: Optional[str] = None
    filename: Optional[str] = None
    document_sha256: str = ""
    pages: list = field(default_factory=list)  # the 1-based page numbers to process, in order
    orientation: Optional[str] = None  # the request's orientation field (app/orientation/upright.py); None: settings'
    lang: Optional[str] = None  # the request's lang (app/engines/fraktur.py); None: auto
    structure: Optional[str] = None  # the request's structure (app/structure); None: the settings'
    pdf_text: Optional[str] = None  # the request's pdf_text (app/sandbox/pdf_text.py); None: the settings'
    keep_document: bool = False  # kept until the job expires (for ?format=pdf), counted in the client's stored bytes
    callback_url: Optional[str] = None  # POSTed the status when the job ends (app/jobs/callbacks.py)
    callback: Optional[dict] = None  # its delivery: {"status", "attempts", "last_status", "last_error", ...}
    created_at: float = field(default_factory=time.time)
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    expires_at: Optional[float] = None  # set when it finishes: finished_at + jobs.ttl_s
    error: Optional[dict] = None  # {"code", "message", "retryable"} of a job that failed as a whole
    engine: Optional[dict] = None
    owner: Optional[str] = None  # the runner holding the lease
    lease_until: float = 0.0
    done: int = 0  # counted by the store from the page results, never incremented
    failed: int = 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def page_options(self) -> PageOptions:
        return PageOptions(orientation=self.orientation, lang=self.lang, structure=self.structure, pdf_text=self.pdf_text)


def job_tag(job_id: str) -> str:
    """What logs name a job by: a short hash. Ray's logs are readable on the node, and where API keys
    are off a job's id is all that guards its document and results."""
    return "j-" + hashlib.sha256(job_id.encode()).hexdigest()[:12]


def iso(timestamp: Optional[float]) -> Optional[str]:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_body(job: Job, base_path: str = "/v1/jobs") -> dict:
    return {
        "id": job.id,
        "status": job.status,
        "pages": {"total": len(job.pages), "done": job.done, "failed": job.failed},
        "created_at": iso(job.created_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "expires_at": iso(job.expires_at),
        "error": job.error,
        "document_kept": job.keep_document,
        "callback": ({"url": job.callback_url, **(job.callback or {"status": "waiting", "attempts": 0})}
                     if job.callback_url else None),
        "status_url": f"{base_path}/{job.id}",
        "result_url": f"{base_path}/{job.id}/result",
    }


def final_status(total: int, failed: int, max_page_error_rate: float) -> str:
    """succeeded with no failed page; partial while failures stay at or under the rate; else failed."""
    if failed == 0:
        return SUCCEEDED
    return PARTIAL if total and failed / total <= max_page_error_rate else FAILED


def result_body(job: Job, results: dict[int, dict]) -> dict:
    """The body of /v1/ocr for a finished job: pages in order, a failed page carrying its error instead of text."""
    pages = []
    for index, number in enumerate(job.pages):
        entry = results.get(number)
        if entry is None:  # only a job that failed as a whole leaves pages unprocessed
            entry = {"error": PageNotProcessed("The job ended before this page.").record()}
        page = dict(entry.get("result") or {"page_number": number, "error": entry["error"]})
        page["index"] = index
        pages.append(page)
    started, finished = job.started_at or job.created_at, job.finished_at or time.time()
    return {
        "id": job.id,
        "status": job.status,
        "engine": job.engine,
        "pages": pages,
        "text": "\n\n".join(page["text"] for page in pages if "text" in page),
        "error": job.error,
        "timings_ms": {"queued": round((started - job.created_at) * 1000, 1),
                       "total": round((finished - started) * 1000, 1)},
    }
