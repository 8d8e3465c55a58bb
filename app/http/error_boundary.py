"""The one error boundary of the HTTP API: every failure a client sees leaves through `error_response`.

Failures inside a route (`to_error` maps any exception, a replica's included, to the taxonomy in
app/errors.py), refusals before a route runs (401 from the key check, 404, 405, validation) and
the readiness probe's 503 all answer `{"error": {"code", "message", "retryable", "request_id"}}`,
with `Retry-After` where the error is retryable. The request id is the one RequestLog fixed for
the request (Serve's, so every deployment's log lines carry it).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import (BadRequest, MethodNotAllowed, NotFound, OCRServiceError, PayloadTooLarge, to_error)
from app.http.request_log import log_fields, request_id_of

# Starlette's own refusals, before any route of ours runs, in the taxonomy's words.
_HTTP_ERRORS = {404: (NotFound, "No such route."), 405: (MethodNotAllowed, "This route does not take that method."),
                413: (PayloadTooLarge, "The request body is too large.")}


def request_id_for(scope: dict) -> str:
    return (scope.get("state") or {}).get("request_id") or request_id_of(scope)


def error_response(error: OCRServiceError, request_id: str, extra: Optional[dict] = None,
                   headers: Optional[dict] = None) -> JSONResponse:
    """The answer for `error`: its status, its body with the request id (and any `extra` fields beside
    `error`), `Retry-After` when it has a retry hint."""
    body = error.body()
    body["error"]["request_id"] = request_id  # the key to the log line with the full detail
    headers = {**({"Retry-After": str(error.retry_after_s)} if error.retry_after_s else {}), **(headers or {})}
    return JSONResponse({**body, **(extra or {})}, status_code=error.status, headers=headers)


def failed(request: Request, exc: BaseException) -> JSONResponse:
    """A route's failure: mapped to the taxonomy, noted in the request's one log line, answered."""
    request_id = request_id_for(request.scope)
    error = to_error(exc, request_id)
    log_fields(request)["error"] = error.code  # into the request's one log line (app/http/request_log.py)
    return error_response(error, request_id)


def answering(shape: Callable[[Request, BaseException], JSONResponse] = failed):
    """A route's one error boundary: whatever the route raises is answered through `shape` (`failed`,
    or the OpenAI API's body: app/http/openai_api.py), so no route catches errors by hand. (FastAPI's
    own handler for Exception answers too, but Starlette raises the exception again after it, and
    Serve then counts the request as the replica's failure.)"""
    def wrap(route):
        @functools.wraps(route)  # FastAPI reads the route's parameters through __wrapped__
        async def guarded(self, request: Request, *args, **kwargs):
            try:
                return await route(self, request, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes an answer
                return shape(request, exc)
        return guarded
    return wrap


def from_http_exception(exc: StarletteHTTPException) -> OCRServiceError:
    kind, message = _HTTP_ERRORS.get(exc.status_code, (BadRequest, None))
    return kind(message or str(exc.detail))


def install(api: FastAPI) -> None:
    """Route every exception FastAPI or Starlette would answer by itself through `error_response`."""

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return failed(request, exc)

    @api.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return failed(request, BadRequest(f"The request is not valid: {exc.errors()}"))

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return failed(request, from_http_exception(exc))
