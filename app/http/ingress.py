"""The HTTP ingress: parse the upload, fan pages out through the pipeline, gather them in order.

Per page: preprocessor (streamed) -> OCRModel.infer -> Postprocessor.process. The OCR
response is handed to the postprocessor unawaited, so a page's image never comes
back through the ingress. Every failure leaves through the one error boundary
(app/http/error_boundary.py) as `{"error": {"code", "message", "retryable", "request_id"}}`.
"""

import asyncio
import logging
import time
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from app import __version__
from app.http.auth import APIKeyMiddleware, KeyRing
from app.formats import parse_format
from app import ui
from app.http import error_boundary, openai_api
from app.http.formatted import formatted
from app.http.ingress_settings import IngressSettings
from app.errors import RequestTimeout, ServiceUnavailable
from app.http.job_routes import JobRoutes
from app.ops import metrics
from app.http.readiness import ReadinessCache, missing_stages, running_replicas
from app.http.request_log import RequestLog, log_fields, stage_totals
from app.pipeline.document_reader import DocumentReader
from app.pipeline.page_pipeline import EngineIdentity, Stages
from app.http.uploads import query_flag, read_bounded, read_upload
from app.schemas import Generation
from app.ops.replica import harden_process

logger = logging.getLogger("ray.serve")

api = FastAPI(title="Offline OCR service", version=__version__)
# The keys of this process's ingress replica (one replica per process); None: the API is open.
_keyring: Optional[KeyRing] = None
ui.install(api)  # the page at /ui (app/ui): its files need no key; the API it calls does
api.add_middleware(APIKeyMiddleware, keyring=lambda: _keyring)
api.add_middleware(RequestLog)  # added last: outermost, so it sees 401s too


error_boundary.install(api)


def check_request_slots(max_ongoing_requests: int, settings: IngressSettings) -> None:
    """At start-up: the replica's request slots hold what its limits let it hold at once, or the long-lived
    requests (uploads, long-polls, event streams) would take the slots /v1/ocr needs."""
    needed = settings.max_inflight_requests + settings.jobs.long_lived_slots
    if max_ongoing_requests < needed:
        raise ValueError(f"The Ingress's max_ongoing_requests={max_ongoing_requests} is less than max_inflight_requests "
                         f"({settings.max_inflight_requests}) + jobs.max_uploads + jobs.max_long_polls + "
                         f"jobs.max_event_streams ({settings.jobs.long_lived_slots}) = {needed}: leave it to the "
                         "builder, or lower those limits.")


def _request_id(request: Request) -> str:
    """The id RequestLog fixed for this request (Serve's, so that every deployment logs it)."""
    return error_boundary.request_id_for(request.scope)


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
@serve.ingress(api)
class Ingress:
    def __init__(
        self,
        settings: IngressSettings,
        preprocessor: DeploymentHandle,
        ocr_model: DeploymentHandle,
        postprocessor: DeploymentHandle,
        job_runner: Optional[DeploymentHandle] = None,
        structure: Optional[DeploymentHandle] = None,
    ):
        harden_process()  # first: nothing below may leave a secret readable through /proc
        self._settings = settings
        stages = Stages(ocr_model, postprocessor, structure, settings.structure_mode)
        self._reader = DocumentReader(preprocessor, stages, settings.page_retries)
        self._pre_config = preprocessor
        self._jobs = JobRoutes(settings.jobs, preprocessor, job_runner)
        self._ocr = ocr_model
        self._post = postprocessor
        self._engine = EngineIdentity(ocr_model)
        self._inflight = 0
        self._started = openai_api.now()  # /v1/models' `created`
        context = serve.get_replica_context()
        self._app_name = context.app_name
        check_request_slots(context._deployment_config.max_ongoing_requests, settings)
        self._readiness = ReadinessCache(self._fetch_readiness, settings.readiness_refresh_s)
        global _keyring
        _keyring = KeyRing(settings.api_keys_file) if settings.api_keys_file else None

    @api.post("/v1/ocr")
    @error_boundary.answering()
    async def ocr(self, request: Request) -> Response:
        started = time.perf_counter()
        request_id = _request_id(request)
        form = parse_format(request.query_params.get("format"))
        page_images = query_flag(request, "page_images")
        # The body first, under a deadline: a client that stalls mid-upload holds no
        # admission slot, so stalled connections cannot turn good requests away.
        limits = self._settings.limits
        upload = await self._within_upload_deadline(read_upload(request, limits.max_upload_bytes))
        upload.page_images = page_images and form == "json"
        if self._at_capacity():
            raise self._overloaded()
        self._inflight += 1
        try:
            return await self._ocr_request(request, request_id, upload, started, form)
        finally:
            self._inflight -= 1

    async def _within_upload_deadline(self, reading):
        try:
            return await asyncio.wait_for(reading, self._settings.limits.upload_read_timeout_s)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"The request body did not arrive within limits.upload_read_timeout_s="
                                 f"{self._settings.limits.upload_read_timeout_s:g} s.", retry_after_s=1) from None

    def _at_capacity(self) -> bool:
        # Admission control: a bounded amount of work per replica; the rest is told to retry.
        return self._inflight >= self._settings.max_inflight_requests

    @staticmethod
    def _overloaded() -> ServiceUnavailable:
        return ServiceUnavailable("The service is at capacity; retry later.", code="overloaded", retry_after_s=2)

    async def _ocr_request(self, request: Request, request_id: str, upload, started: float, form: str) -> Response:
        read_s = time.perf_counter() - started
        metrics.stage("read_upload", read_s)
        log_fields(request)["bytes"] = len(upload.data)
        pages = await self._reader.read(request_id, upload)
        engine = await self._engine.get()
        total_s = time.perf_counter() - started
        metrics.stage("total", total_s)
        log_fields(request).update(pages=len(pages), engine=engine["name"], model_version=engine["version"],
                                        stages_ms=stage_totals(pages, read_s))
        body = {
            "id": request_id,
            "engine": engine,
            "pages": pages,
            "text": "\n\n".join(page["text"] for page in pages),
            "timings_ms": {"read_upload": round(read_s * 1000, 1), "total": round(total_s * 1000, 1)},
        }
        # Serve's proxy puts X-Request-ID on every answer
        return await formatted(form, body, self._pre_config, request_id, upload.data, upload.content_type,
                               upload.filename)

    # -- the OpenAI-compatible API (app/http/openai_api.py): the same pipeline, OpenAI's shapes --

    @api.get("/v1/models")
    @error_boundary.answering(openai_api.failed)
    async def models(self, request: Request) -> JSONResponse:
        engine = await self._engine.get()
        return JSONResponse(openai_api.models_body(engine, self._started))

    @api.post("/v1/chat/completions")
    @error_boundary.answering(openai_api.failed)
    async def chat_completions(self, request: Request):
        request_id = _request_id(request)
        limits = self._settings.limits
        body = await self._within_upload_deadline(read_bounded(request, openai_api.body_limit(limits.max_upload_bytes)))
        chat, upload = await asyncio.to_thread(openai_api.parse_chat, body, limits.max_upload_bytes)
        engine = await self._engine.get()
        model = openai_api.check_model(chat.model, engine)
        generation = chat.generation(self._engine.token_cap)
        if self._at_capacity():
            raise self._overloaded()
        completion_id, created = f"chatcmpl-{request_id}", openai_api.now()
        log_fields(request).update(bytes=len(upload.data), engine=engine["name"], api="openai")
        if chat.stream:
            return StreamingResponse(self._chat_events(request_id, upload, generation, completion_id, model, created,
                                                       chat.include_usage), media_type="text/event-stream")
        self._inflight += 1
        try:
            pages = await self._reader.read(request_id, upload, generation)
        finally:
            self._inflight -= 1
        log_fields(request)["pages"] = len(pages)
        return JSONResponse(openai_api.completion_body(completion_id, model, created, pages))

    async def _chat_events(self, request_id: str, upload, generation: Generation, completion_id: str, model: str,
                           created: int, include_usage: bool):
        """Server-Sent Events: the role, then each page's text as it is read, the finish reason, usage if
        asked, [DONE]. A failure after the first event is an error event (the status line is sent)."""
        self._inflight += 1
        pages: list[dict] = []
        try:
            yield openai_api.chunk(completion_id, model, created, {"role": "assistant", "content": ""})
            async for page in self._reader.read_in_order(request_id, upload, generation):
                text = page["text"] if not pages else "\n\n" + page["text"]
                pages.append(page)
                yield openai_api.chunk(completion_id, model, created, {"content": text})
            yield openai_api.chunk(completion_id, model, created, {}, openai_api.finish_reason(pages))
            if include_usage:
                yield openai_api.chunk(completion_id, model, created, {}, usage_body=openai_api.usage(pages))
        except Exception as exc:
            yield openai_api.stream_error(request_id, exc)
        finally:
            self._inflight -= 1
        yield openai_api.DONE

    # -- async jobs (app/http/job_routes.py): the store holds everything, so any replica answers --

    @api.post("/v1/jobs")
    @error_boundary.answering()
    async def submit_job(self, request: Request) -> JSONResponse:
        return await self._jobs.submit(request, _request_id(request))

    @api.get("/v1/jobs/{job_id}")
    @error_boundary.answering()
    async def job_status(self, request: Request, job_id: str) -> JSONResponse:
        return await self._jobs.status(request, _request_id(request), job_id)

    @api.get("/v1/jobs/{job_id}/result")
    @error_boundary.answering()
    async def job_result(self, request: Request, job_id: str):
        return await self._jobs.result(request, _request_id(request), job_id)

    @api.get("/v1/jobs/{job_id}/events")
    @error_boundary.answering()
    async def job_events(self, request: Request, job_id: str):
        return await self._jobs.events(request, _request_id(request), job_id)

    @api.delete("/v1/jobs/{job_id}")
    @error_boundary.answering()
    async def delete_job(self, request: Request, job_id: str):
        return await self._jobs.delete(request, _request_id(request), job_id)

    @api.get("/healthz")
    async def healthz(self) -> dict:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(self, request: Request) -> JSONResponse:
        snapshot = await self._readiness.snapshot(self._settings.readiness_timeout_s)
        replicas = (snapshot or {}).get("replicas", {})
        checks = {"status_calls": self._readiness.fetches, "age_s": self._readiness.age_s()}
        missing = missing_stages(replicas)
        if missing:
            error = ServiceUnavailable(f"Stages with no running replica yet: {', '.join(missing)}.", code="not_ready")
            return error_boundary.error_response(error, _request_id(request), extra={"replicas": replicas,
                                                                                       "checks": checks})
        return JSONResponse({"status": "ready", "replicas": replicas, "gpu": snapshot.get("gpu"), "checks": checks})

    async def _fetch_readiness(self) -> dict:
        """One refresh of the readiness cache: replica counts, and GPU telemetry from one OCR replica."""
        replicas = await asyncio.to_thread(running_replicas, self._app_name)
        gpu = None
        if replicas.get("OCRModel", 0) > 0:
            try:
                gpu = (await asyncio.wait_for(self._ocr.info.remote(), self._settings.readiness_timeout_s)).get("gpu")
            except Exception:
                gpu = None
        return {"replicas": replicas, "gpu": gpu}

    @api.get("/v1/info")
    @error_boundary.answering()
    async def info(self, request: Request) -> dict:
        try:
            engine, preprocess, sandbox = await asyncio.wait_for(
                asyncio.gather(self._ocr.info.remote(), self._pre_config.config.remote(),
                               self._pre_config.sandbox.remote()),
                self._settings.readiness_timeout_s)
        except Exception as exc:
            raise ServiceUnavailable("The OCR replicas are not answering yet.", code="not_ready") from exc
        return {
            "service": {"version": __version__},
            "engine": engine,
            "preprocess": preprocess,  # one Preprocessor replica's user_config in force
            "sandbox": sandbox,  # and what guards its secrets (app/sandbox/confine.py)
            "settings": self._settings.public,
        }

