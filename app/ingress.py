"""The HTTP ingress: parse the upload, fan pages out through the pipeline, gather them in order.

Per page: preprocessor (streamed) -> OCRModel.infer -> Postprocessor.process. The OCR
response is handed to the postprocessor unawaited, so a page's image never comes
back through the ingress. This is the one error boundary: every failure leaves as
`{"error": {"code", "message", "retryable"}}` with its status.
"""

import asyncio
import logging
import time
import uuid
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException
from ray.serve.handle import DeploymentHandle

from app import __version__
from app.config import Settings
from app.errors import OCRServiceError, ServiceUnavailable, to_error
from app.uploads import read_upload

logger = logging.getLogger("ray.serve")

api = FastAPI(title="Offline OCR service", version=__version__)


@api.exception_handler(Exception)
async def _error_boundary(request: Request, exc: Exception) -> JSONResponse:
    return error_response(to_error(exc))


@api.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    body = {"error": {"code": "bad_request", "message": str(exc.errors()), "retryable": False}}
    return JSONResponse(body, status_code=400)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    body = {"error": {"code": code, "message": str(exc.detail), "retryable": False}}
    return JSONResponse(body, status_code=exc.status_code)


def error_response(error: OCRServiceError) -> JSONResponse:
    headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def _running_replicas() -> dict:
    """RUNNING replicas per deployment of this application. A replica is RUNNING only after warm-up."""
    app_name = serve.get_replica_context().app_name
    status = serve.status().applications.get(app_name)
    if status is None:
        return {}
    return {
        name: int(deployment.replica_states.get("RUNNING", 0))
        for name, deployment in status.deployments.items()
    }


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
@serve.ingress(api)
class Ingress:
    def __init__(
        self,
        settings: Settings,
        preprocessor: DeploymentHandle,
        ocr_model: DeploymentHandle,
        postprocessor: DeploymentHandle,
    ):
        self._settings = settings
        self._pre = preprocessor.options(stream=True)
        self._ocr = ocr_model
        self._post = postprocessor
        self._engine: Optional[dict] = None
        self._inflight = 0

    @api.post("/v1/ocr")
    async def ocr(self, request: Request) -> JSONResponse:
        if self._inflight >= self._settings.max_inflight_requests:
            # Admission control: a bounded amount of work per replica; the rest is told to retry.
            return error_response(
                ServiceUnavailable("The service is at capacity; retry later.", code="overloaded", retry_after_s=2)
            )
        self._inflight += 1
        try:
            return await self._ocr_request(request)
        finally:
            self._inflight -= 1

    async def _ocr_request(self, request: Request) -> JSONResponse:
        started = time.perf_counter()
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            upload = await read_upload(request, self._settings.limits.max_upload_bytes)
            read_ms = (time.perf_counter() - started) * 1000
            pages = await self._run_pipeline(request_id, upload)
            engine = await self._engine_identity()
        except Exception as exc:
            error = to_error(exc)
            logger.info("request %s failed: %s %s", request_id, error.status, error.code)
            return error_response(error)
        total_ms = (time.perf_counter() - started) * 1000
        logger.info("request %s: %d page(s) in %.0f ms", request_id, len(pages), total_ms)
        return JSONResponse(
            {
                "id": request_id,
                "engine": engine,
                "pages": pages,
                "text": "\n\n".join(page["text"] for page in pages),
                "timings_ms": {"read_upload": round(read_ms, 1), "total": round(total_ms, 1)},
            },
            headers={"X-Request-ID": request_id},
        )

    async def _run_pipeline(self, request_id: str, upload) -> list[dict]:
        """Dispatch each page onward as soon as the preprocessor yields it; gather in page order."""
        in_flight = []
        try:
            async for page in self._pre.prepare.remote(request_id, upload.data, upload.content_type, upload.pages):
                in_flight.append(self._post.process.remote(self._ocr.infer.remote(page)))
        except Exception:
            for response in in_flight:
                response.cancel()
            raise
        results = await asyncio.gather(*in_flight, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]
        return sorted(results, key=lambda page: page["index"])

    async def _engine_identity(self) -> dict:
        if self._engine is None:
            info = await self._ocr.info.remote()
            self._engine = {"name": info["name"], "version": info["version"]}
        return self._engine

    @api.get("/healthz")
    async def healthz(self) -> dict:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(self) -> JSONResponse:
        replicas = await asyncio.to_thread(_running_replicas)
        if replicas.get("OCRModel", 0) < 1:
            error = ServiceUnavailable("The OCR replicas are still loading or warming up.", code="not_ready")
            body = error.body() | {"replicas": replicas}
            return JSONResponse(body, status_code=503, headers={"Retry-After": str(error.retry_after_s)})
        body = {"status": "ready", "replicas": replicas}
        try:  # telemetry from one OCR replica: GPU memory and utilisation where NVML is present
            info = await asyncio.wait_for(self._ocr.info.remote(), self._settings.readiness_timeout_s)
            body["gpu"] = info.get("gpu")
        except Exception:
            body["gpu"] = None
        return JSONResponse(body)

    @api.get("/v1/info")
    async def info(self) -> dict:
        try:
            engine = await asyncio.wait_for(self._ocr.info.remote(), self._settings.readiness_timeout_s)
        except Exception as exc:
            raise ServiceUnavailable("The OCR replicas are not answering yet.", code="not_ready") from exc
        return {
            "service": {"version": __version__},
            "engine": engine,
            "settings": self._settings.model_dump(),
        }

