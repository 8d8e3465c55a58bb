"""POST/GET/DELETE /v1/jobs: what the ingress does for jobs, against the store only.

Any ingress replica answers for any job: nothing here is kept in memory between requests.
A job is visible only to the API client (key name) that submitted it; to any other it is 404.

Request slots are the replica's scarcest resource (Serve's max_ongoing_requests): a stalled
upload or a long-poll holds one while sending nothing. So job uploads are counted (jobs.
max_uploads per replica, quotas.max_uploads per client: beyond, 503/429 before a byte is read)
and must keep sending (jobs.upload_idle_timeout_s); long-polls beyond jobs.max_long_polls or the
client's quota are answered at once, as a plain status call, instead of holding a slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import uuid
from typing import Optional

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from ray.serve.handle import DeploymentHandle

from app.config import Jobs
from app.errors import (BadRequest, Conflict, NotConfigured, NotFound, OCRServiceError, RequestTimeout,
                        ServiceUnavailable)
from app.formats import parse_format
from app.http.formatted import formatted
from app.http.job_slots import ByteBudget, Holders
from app.jobs.callbacks import allowed_url
from app.jobs.events import job_events, last_event_id
from app.jobs.model import Job, result_body, status_body
from app.jobs.searchable import SearchableRenders
from app.jobs.store import JobStore, admission
from app.jobs.stores import open_store
from app.http.proxy_guard import safe_request_id
from app.http.uploads import query_flag, read_upload

logger = logging.getLogger("ray.serve")
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_WAIT_S = 60.0


class JobRoutes:
    def __init__(self, jobs: Jobs, preprocessor: DeploymentHandle, runner: Optional[DeploymentHandle],
                 base_path: str = "/v1/jobs"):
        self._jobs = jobs
        self._pre = preprocessor
        self._runner = runner
        self._base = base_path
        self._store: Optional[JobStore] = open_store(jobs) if jobs.store else None
        self._uploads = Holders("job uploads", jobs.max_uploads, "max_uploads")
        self._long_polls = Holders("long-polls", jobs.max_long_polls, "max_long_polls")
        self._streams = Holders("event streams", jobs.max_event_streams, "max_event_streams")
        self._buffered = ByteBudget(jobs.max_upload_buffer_bytes)
        self._searchable = SearchableRenders(self._uploads, self._buffered, jobs.max_upload_buffer_bytes // 8)

    def _require_store(self) -> JobStore:
        if self._store is None:
            raise NotConfigured("Jobs are not enabled on this deployment: set jobs.store in its config.")
        return self._store

    async def _call(self, method, *args):
        try:
            return await asyncio.to_thread(method, *args)
        except OCRServiceError:
            raise  # the store's own answer: a quota (429) or no space (507)
        except Exception as exc:
            raise ServiceUnavailable("The job store is not answering; retry.", code="job_store_unavailable") from exc

    async def submit(self, request: Request, request_id: str) -> JSONResponse:
        store = self._require_store()
        client = _client(request)
        logger.info("request %s (job submit) from client %s", request_id, client)
        query_flag(request, "keep_document")  # a bad flag or callback is refused before the upload is read
        callback_url = request.query_params.get("callback_url")
        if callback_url is not None:
            allowed_url(callback_url, self._jobs.callbacks)
        key = request.headers.get("idempotency-key")
        if key is not None and safe_request_id(key) is None:
            raise BadRequest("Idempotency-Key must be 1-128 characters of letters, digits and -_.:",
                             code="invalid_idempotency_key")
        announced = _announced(request, self._jobs.max_upload_bytes)
        with self._uploads.hold(client, self._jobs.quotas_for(client).max_uploads), self._buffered.reserve(announced):
            upload = await self._read(request)
        # What arrived (at most what was announced) stays held until the job is stored: no await in between.
        with self._buffered.reserve(len(upload.data)):
            return await self._store_job(request, request_id, store, client, key, upload)

    async def _store_job(self, request: Request, request_id: str, store: JobStore, client: str,
                         key: Optional[str], upload) -> JSONResponse:
        pages = await self._pre.select_pages.remote(request_id, upload.data, upload.content_type, upload.pages,
                                                    self._jobs.max_pages)
        digest = await asyncio.to_thread(lambda: hashlib.sha256(upload.data).hexdigest())
        job = Job(id=uuid.uuid4().hex, client=client, content_type=upload.content_type,
                  filename=(upload.filename or "")[:255] or None, document_sha256=digest, pages=pages,
                  orientation=upload.orientation, lang=upload.lang, structure=upload.structure,
                  pdf_text=upload.pdf_text, keep_document=query_flag(request, "keep_document"),
                  callback_url=request.query_params.get("callback_url"),
                  created_at=time.time())
        stored, created = await self._call(store.create, job, upload.data, key, admission(self._jobs, client))
        if not created and stored.document_sha256 != job.document_sha256:
            raise Conflict("This Idempotency-Key was already used for a different document.",
                           code="idempotency_key_reused")
        if created and self._runner is not None:
            self._runner.wake.remote()  # fire and forget: the runners poll anyway
        body = status_body(stored, self._base)
        return JSONResponse(body, status_code=202 if created else 200,
                            headers={"Location": body["status_url"]})

    async def _read(self, request: Request):
        jobs = self._jobs
        try:
            return await asyncio.wait_for(read_upload(request, jobs.max_upload_bytes, jobs.upload_idle_timeout_s),
                                          jobs.upload_read_timeout_s)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"The document did not arrive within jobs.upload_read_timeout_s="
                                 f"{jobs.upload_read_timeout_s:g} s, or paused past jobs.upload_idle_timeout_s="
                                 f"{jobs.upload_idle_timeout_s:g} s.", retry_after_s=1) from None

    async def _job(self, request: Request, job_id: str) -> Job:
        store = self._require_store()
        job = await self._call(store.get, job_id) if _JOB_ID.match(job_id) else None
        if job is None or not _owns(request, job):
            raise NotFound(f"No job {job_id[:64]!r}: it never existed, was deleted, or expired.", code="job_not_found")
        return job

    async def status(self, request: Request, request_id: str, job_id: str) -> JSONResponse:
        wait = _wait_s(request.query_params.get("wait"))
        job = await self._job(request, job_id)
        client = _client(request)
        if wait and not job.finished and self._long_polls.admits(client, self._jobs.quotas_for(client).max_long_polls):
            with self._long_polls.hold(client):
                job = await self._wait_for_change(request, job, wait)
        return JSONResponse(status_body(job, self._base))

    async def events(self, request: Request, request_id: str, job_id: str) -> StreamingResponse:
        """Server-Sent Events of the job's pages as they finish, then its end (app/jobs/events.py)."""
        seen = last_event_id(request.headers.get("last-event-id"))
        job = await self._job(request, job_id)
        client = _client(request)
        # Checked and held in one step, before the response starts: a burst of streams cannot all pass the
        # check and then all hold. Let go when the stream ends, or when its response never ran (the
        # background task runs after the response, whether or not the client stayed).
        held = self._streams.take(client, self._jobs.quotas_for(client).max_event_streams)

        async def current(job_id: str) -> Optional[Job]:
            try:
                return await self._job(request, job_id)
            except NotFound:
                return None

        async def stream():
            try:
                async for chunk in job_events(job, seen, lambda i: self._call(self._store.recorded_order, i), current,
                                              request.is_disconnected, self._jobs.events_poll_s,
                                              self._jobs.events_keepalive_s, self._base):
                    yield chunk
            finally:
                held()

        return StreamingResponse(stream(), media_type="text/event-stream", background=BackgroundTask(held),
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _wait_for_change(self, request: Request, job: Job, wait: float) -> Job:
        deadline = time.monotonic() + wait
        first = job.status
        while job.status == first and not job.finished and time.monotonic() < deadline:
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            job = await self._job(request, job.id)
        return job

    async def result(self, request: Request, request_id: str, job_id: str) -> Response:
        form = parse_format(request.query_params.get("format"))
        job = await self._job(request, job_id)
        if not job.finished:
            return JSONResponse(status_body(job, self._base), status_code=202, headers={"Retry-After": "2"})
        if form == "pdf":
            return await self._searchable_pdf(request, request_id, job)
        body = result_body(job, await self._call(self._store.results, job_id))
        return await formatted(form, body, self._pre, request_id, None, job.content_type, job.filename)

    async def _searchable_pdf(self, request: Request, request_id: str, job: Job) -> Response:
        client = _client(request)

        async def render() -> bytes:
            body = result_body(job, await self._call(self._store.results, job.id))
            document = await self._call(self._store.document, job.id)
            if document is None:
                raise Conflict("The job's kept document expired meanwhile.", code="document_not_kept")
            return await self._pre.searchable_pdf.remote(request_id, document, job.content_type, body["pages"])

        size = await self._call(self._store.document_size, job.id)
        return await self._searchable.answer(job, client, self._jobs.quotas_for(client).max_uploads, size, render)

    async def delete(self, request: Request, request_id: str, job_id: str) -> Response:
        await self._job(request, job_id)
        # Canceled first, so that a runner holding it writes nothing more, then everything goes.
        await self._call(self._store.finish, job_id, None, "canceled", self._jobs.ttl_s)
        await self._call(self._store.delete, job_id)
        self._searchable.forget(job_id)
        return Response(status_code=204)


def _announced(request: Request, max_upload_bytes: int) -> int:
    declared = request.headers.get("content-length", "")
    return min(int(declared), max_upload_bytes) if declared.isdigit() else max_upload_bytes


def _client(request: Request) -> str:
    """The tenant quotas, turns and Idempotency-Keys are kept by: the API key's name; with keys off, `-`
    and the peer's address, so that one caller's flood is its own and not the whole room's."""
    name = getattr(request.state, "api_client", None)
    if name:
        return name
    return f"-{request.client.host}" if request.client else "-"


def _owns(request: Request, job: Job) -> bool:
    """Whether the caller may see the job: its key's; with keys off any keyless caller's (the id is the
    secret, as before: a client that polls from another host still finds its job)."""
    name = getattr(request.state, "api_client", None)
    return job.client == name if name else job.client.startswith("-")


def _wait_s(raw: Optional[str]) -> float:
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        raise BadRequest("wait must be a number of seconds (at most 60).", code="invalid_wait") from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise BadRequest("wait must be between 0 and 60 seconds.", code="invalid_wait")
    return wait
