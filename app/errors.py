"""The public error taxonomy: every failure a client can see, with its HTTP status.

Deployments raise `OCRServiceError` subclasses; the ingress turns any exception,
including a `RayTaskError` wrapping one from another replica, into the JSON body
`{"error": {"code", "message", "retryable", "request_id"}}` through `to_error()` and
app/http/error_boundary.py.

The taxonomy itself imports nothing of Ray: the decoder sandbox's worker processes
raise these classes and must start in a fraction of a second. Only the mapping of
Ray's own exceptions (`unwrap`, `to_error`, `is_replica_loss`) imports Ray, lazily.
"""

from __future__ import annotations

import logging
import re
from typing import Optional

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
        return {"error": self.record()}

    def record(self) -> dict:
        """The error as a job's status or a failed page carries it (and as the HTTP body holds it)."""
        return {"code": self.code, "message": self.message, "retryable": self.retryable}

    def __reduce__(self):
        # Keep code and retry hint when Ray pickles the exception between replicas.
        return (_rebuild, (type(self), self.message, self.code, self.retry_after_s))


def _rebuild(cls, message, code, retry_after_s):
    return cls(message, code=code, retry_after_s=retry_after_s)


class BadRequest(OCRServiceError):
    status, code = 400, "bad_request"


class Unauthorized(OCRServiceError):
    status, code = 401, "unauthorized"


class NotFound(OCRServiceError):
    status, code = 404, "not_found"


class MethodNotAllowed(OCRServiceError):
    status, code = 405, "method_not_allowed"


class Conflict(OCRServiceError):
    status, code = 409, "conflict"


class NotConfigured(OCRServiceError):
    """A capability this deployment was not given (for example jobs without `jobs.store`)."""

    status, code = 501, "not_configured"


class PayloadTooLarge(OCRServiceError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(OCRServiceError):
    status, code = 415, "unsupported_media_type"


class UnprocessableDocument(OCRServiceError):
    status, code = 422, "unprocessable_document"


class DocumentTooComplex(UnprocessableDocument):
    """The document passed a decoding limit (memory or time): the same file will fail again."""

    code = "document_too_complex"


class RequestTimeout(OCRServiceError):
    """The client did not send its body in time; a retry over a better link may succeed."""

    status, code, retryable = 408, "upload_timeout", True


class ServiceUnavailable(OCRServiceError):
    status, code, retryable = 503, "unavailable", True

    def __init__(self, message: str, *, code: Optional[str] = None, retry_after_s: Optional[int] = 5):
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class QuotaExceeded(OCRServiceError):
    """A client is past one of its own limits (app/jobs/quotas.py); the message names the limit."""

    status, code, retryable = 429, "quota_exceeded", True

    def __init__(self, message: str, *, code: Optional[str] = None, retry_after_s: Optional[int] = 30):
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class InsufficientStorage(OCRServiceError):
    """The job store is full (its cap, or the disk): nothing was accepted; retry once space is freed."""

    status, code, retryable = 507, "insufficient_storage", True

    def __init__(self, message: str, *, code: Optional[str] = None, retry_after_s: Optional[int] = 60):
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class EngineFailure(OCRServiceError):
    """The engine raised on a page it had accepted: our fault, so a 500 that says so."""

    status, code = 500, "engine_failure"


class JobFailure(OCRServiceError):
    """Why a job, or one of its pages, ended without its text: recorded in the store, shown in the job's
    status (`error`) and a failed page's `error` in its result. Never an HTTP answer of its own: the
    job's routes answer 200 with the job, which carries it."""


class JobDocumentLost(JobFailure):
    code = "document_lost"  # the store lost the job's document (an evicting Redis)


class TooManyFailedPages(JobFailure):
    code = "too_many_failed_pages"  # more than jobs.max_page_error_rate of its pages failed


class DecodeBudgetExceeded(JobFailure):
    code = "decode_budget_exceeded"  # a page not read: the job spent its quotas.max_decode_s


class JobExpired(JobFailure):
    code = "job_expired"  # unfinished jobs.max_unfinished_age_s after its submit


class PageNotProcessed(JobFailure):
    code, retryable = "not_processed", True  # the job ended before this page: submitting again may read it


def _ray_exceptions():
    from ray import exceptions as ray_exceptions
    from ray.serve import exceptions as serve_exceptions

    return ray_exceptions, serve_exceptions


def unwrap(exc: BaseException) -> BaseException:
    """Peel `RayTaskError` layers to reach the exception a replica actually raised."""
    ray_exceptions, _ = _ray_exceptions()
    for _ in range(16):  # bounded: a chain of replicas, never a cycle
        cause = getattr(exc, "cause", None) if isinstance(exc, ray_exceptions.RayTaskError) else None
        if not isinstance(cause, BaseException):
            break
        exc = cause
    return exc


def _chain(exc: BaseException):
    """The exception, the ones it wraps (RayTaskError.cause) and its Python causes, bounded."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 32:
        current = todo.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        todo.extend(c for c in (getattr(current, "cause", None), current.__cause__, current.__context__)
                    if isinstance(c, BaseException))
    return seen


# Words Serve uses when a call failed because the replica (or the one that produced its
# input) is gone, in the RayServeException it raises without a typed cause. Whole words only:
# a "deadline" is no dead replica, and is not retried as one.
_REPLICA_LOSS_WORDS = re.compile(r"\b(actor died|actordiederror|actorunavailableerror|unavailable|was killed|dead|"
                                 r"worker crashed|node died)\b")


def is_replica_loss(exc: BaseException) -> bool:
    """True when a call failed because a replica or its worker died, not because of the request.

    OCR and postprocessing of a page are idempotent, so such a failure is retried once.
    """
    ray_exceptions, serve_exceptions = _ray_exceptions()
    lost = (ray_exceptions.RayActorError, ray_exceptions.WorkerCrashedError, ray_exceptions.NodeDiedError,
            ray_exceptions.ObjectLostError, ray_exceptions.OwnerDiedError, ray_exceptions.OutOfMemoryError,
            serve_exceptions.DeploymentUnavailableError)
    for current in _chain(exc):
        if isinstance(current, OCRServiceError):
            return False  # a replica answered, with an error of its own
        if isinstance(current, lost):
            return True
        if isinstance(current, serve_exceptions.RayServeException):
            if _REPLICA_LOSS_WORDS.search(str(current).lower()):
                return True
    return False


def to_error(exc: BaseException, request_id: Optional[str] = None, log: bool = True) -> OCRServiceError:
    """Map any exception to the public taxonomy. Unknown ones are logged with their trace (unless
    `log` is off: the retry rule asks only whether an error is retryable).

    The client sees no exception text: the message names the request id, under which
    the log line holds the full trace.
    """
    ray_exceptions, serve_exceptions = _ray_exceptions()
    exc = unwrap(exc)
    if isinstance(exc, OCRServiceError):
        return exc
    if isinstance(exc, serve_exceptions.BackPressureError):
        return ServiceUnavailable("The service is at capacity; retry later.", code="overloaded", retry_after_s=2)
    if isinstance(exc, ray_exceptions.OutOfMemoryError):
        return ServiceUnavailable("A stage ran out of memory on its node; retry later.", code="stage_out_of_memory")
    if isinstance(exc, ray_exceptions.TaskCancelledError):
        return ServiceUnavailable("The work was cancelled inside the service; retry.", code="cancelled", retry_after_s=1)
    if is_replica_loss(exc):
        return ServiceUnavailable("A stage of the OCR pipeline is unavailable.", code="stage_unavailable")
    if isinstance(exc, TimeoutError):
        return ServiceUnavailable("The request timed out inside the service.", code="timeout")
    if log:
        logger.error("request %s: unexpected error reached the error boundary", request_id or "-", exc_info=exc)
    return OCRServiceError(f"Internal error; the service log has the details under request id {request_id or '-'}.")


def one_of(value: Optional[str], choices: tuple, field: str) -> Optional[str]:
    """A request's choice field, trimmed and lower-cased; None where the request did not set it.
    Anything else is 400 bad_request, naming the choices."""
    if value is None:
        return None
    choice = value.strip().lower()
    if choice not in choices:
        raise BadRequest(f"{field} must be one of {', '.join(choices)}; got {value[:40]!r}.", code="bad_request")
    return choice
