"""One log line and one count per HTTP request, whatever answered it (auth, a route, an error).

`RequestLog` is the ingress's outermost ASGI middleware. It fixes the request id first
(Serve's, which is the client's `X-Request-ID` when that is a plain token: Serve then
tags every log line of the request with it, in every deployment the request reaches),
lets the route add its own fields to `request.state.log_fields` (bytes, pages, engine,
stage times), and on the way out writes the line and counts `ocr_requests_total`.
With `logging.format: json` the fields are one JSON object under the key `ocr`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Optional

from app.ops import metrics
from app.http.proxy_guard import safe_request_id

logger = logging.getLogger("ray.serve")
CLIENT_CLOSED = 499  # nginx's code for a client that left before the answer


def serve_request_id() -> Optional[str]:
    """The id Serve's proxy gave this request (its log lines carry it), if inside one."""
    try:
        from ray.serve.context import _get_serve_request_context

        return _get_serve_request_context().request_id or None
    except Exception:
        return None


def request_id_of(scope: dict) -> str:
    """Serve's id for the request, else the client's plain X-Request-ID, else a fresh one."""
    header = next((value for name, value in scope.get("headers") or [] if name == b"x-request-id"), b"")
    client_id = safe_request_id(header.decode("latin-1")) if header else None
    return serve_request_id() or client_id or uuid.uuid4().hex


def route_template(scope: dict) -> str:
    """The route's path template (`/v1/jobs/{job_id}`), never the raw path, so labels stay bounded.
    FastAPI leaves the matched route in the scope; a request answered before routing (a 401 of
    the key check, an unknown path) is `unrouted`."""
    route = scope.get("route")
    return getattr(route, "path_format", None) or getattr(route, "path", None) or "unrouted"


class RequestLog:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id_of(scope)
        state["log_fields"] = {}
        answered: dict = {}

        async def sending(message):
            if message["type"] == "http.response.start":
                answered["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            answered.setdefault("status", CLIENT_CLOSED)
            raise
        except Exception:
            answered.setdefault("status", 500)
            raise
        finally:
            self._done(scope, state, answered.get("status", CLIENT_CLOSED), time.perf_counter() - started)

    def _done(self, scope: dict, state: dict, status: int, seconds: float) -> None:
        route = route_template(scope)
        metrics.inc("ocr_requests_total", route=route, code=str(status))
        fields = {"request_id": state["request_id"], "method": scope.get("method"), "route": route,
                  "status": status, "ms": round(seconds * 1000, 1), "client": state.get("api_client") or "-",
                  **state.get("log_fields", {})}
        text = " ".join(f"{key}={value}" for key, value in fields.items() if key != "request_id")
        logger.info("request %s %s", state["request_id"], text, extra={"ocr": fields})


def log_fields(request) -> dict:
    """What a route adds to its request's log line (RequestLog writes it when the answer leaves)."""
    return request.scope.setdefault("state", {}).setdefault("log_fields", {})


_SUMMED = ("decode", "render", "resize_encode", "postprocess")
_LONGEST = {"queue_wait": "queue_wait", "engine_batch": "engine"}


def stage_totals(pages: list[dict], read_s: float) -> dict:
    """A request's ms per stage, from its pages' timings: CPU stages summed over the pages;
    queue_wait and engine, which the pages spend side by side, as the longest page's."""
    totals = {"read_upload": round(read_s * 1000, 1)}
    for page in pages:
        for key, value in page.get("timings_ms", {}).items():
            if key in _SUMMED:
                totals[key] = round(totals.get(key, 0.0) + value, 1)
            elif key in _LONGEST:
                totals[_LONGEST[key]] = max(totals.get(_LONGEST[key], 0.0), value)
    return totals
