"""The public error taxonomy: every failure a client can see, with its HTTP status.

Deployments raise `OCRServiceError` subclasses; the ingress turns any exception,
including a `RayTaskError` wrapping one from another replica, into the JSON body
`{"error": {"code", "message", "retryable"}}` through `to_error()`.
"""

from __future__ import annotations

import logging
from typing import Optional

from ray.exceptions import RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

logger = logging.getLogger("ray.serve")


class OCRServiceError(Exception):
    status: int = 500
    code: str = "internal_error"
    retryable: bool = False

    def __init__(self, message: str, *, code: Optional[str] = None, retry_after_s: Optional[int] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}

    def __reduce__(self):
        # Keep code and retry hint when Ray pickles the exception between replicas.
        return (_rebuild, (type(self), self.message, self.code, self.retry_after_s))


def _rebuild(cls, message, code, retry_after_s):
    return cls(message, code=code, retry_after_s=retry_after_s)


class BadRequest(OCRServiceError):
    status, code = 400, "bad_request"


class PayloadTooLarge(OCRServiceError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(OCRServiceError):
    status, code = 415, "unsupported_media_type"


class UnprocessableDocument(OCRServiceError):
    status, code = 422, "unprocessable_document"


class ServiceUnavailable(OCRServiceError):
    status, code, retryable = 503, "unavailable", True

    def __init__(self, message: str, *, code: Optional[str] = None, retry_after_s: Optional[int] = 5):
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class EngineFailure(OCRServiceError):
    """The engine raised on a page it had accepted: our fault, so a 500 that says so."""

    status, code = 500, "engine_failure"


def unwrap(exc: BaseException) -> BaseException:
    """Peel `RayTaskError` layers to reach the exception a replica actually raised."""
    for _ in range(16):  # bounded: a chain of replicas, never a cycle
        cause = getattr(exc, "cause", None) if isinstance(exc, RayTaskError) else None
        if not isinstance(cause, BaseException):
            break
        exc = cause
    return exc


def to_error(exc: BaseException) -> OCRServiceError:
    """Map any exception to the public taxonomy. Unknown ones are logged with their trace."""
    exc = unwrap(exc)
    if isinstance(exc, OCRServiceError):
        return exc
    if isinstance(exc, BackPressureError):
        return ServiceUnavailable("The service is at capacity; retry later.", code="overloaded", retry_after_s=2)
    if isinstance(exc, DeploymentUnavailableError):
        return ServiceUnavailable("A stage of the OCR pipeline is unavailable.", code="stage_unavailable")
    if isinstance(exc, TimeoutError):
        return ServiceUnavailable("The request timed out inside the service.", code="timeout")
    logger.error("unexpected error reached the error boundary", exc_info=exc)
    return OCRServiceError(f"Internal error: {type(exc).__name__}")
