"""A guard in front of Ray Serve's HTTP proxy: headers the proxy would choke on never reach it.

Serve 2.60's proxy decodes `X-Request-ID` (and its routing headers) as UTF-8 before any
application code runs; one byte 0xff there answers a plain-text 500, and any other value
goes verbatim into every log line. This middleware drops such a header, so the proxy makes
up a request id of its own. It is installed through Serve's hook
`RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=app.http.proxy_guard:middlewares`, which must be in
the environment of the process that starts each Ray node (`python -m app`, cluster/ scripts,
the image); `PROXY_GUARD_ENV` is that pair.
"""

from __future__ import annotations

from typing import Optional

PROXY_GUARD_ENV = ("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", "app.http.proxy_guard:middlewares")
_REQUEST_ID = b"x-request-id"
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
# Headers whose values the proxy decodes as UTF-8 (routing: multiplexed model, session).
_DECODED_BY_PROXY = (b"serve_multiplexed_model_id", b"serve-multiplexed-model-id", b"x-session-id")


def safe_request_id(value: Optional[str]) -> Optional[str]:
    """The value if it is a plain token of at most 128 characters, else None (one is made up)."""
    if value and len(value) <= 128 and all(c in _ID_CHARS for c in value):
        return value
    return None


def _keep(name: bytes, value: bytes) -> bool:
    if name.lower() == _REQUEST_ID:
        try:
            return safe_request_id(value.decode("ascii")) is not None
        except UnicodeDecodeError:
            return False
    if name.lower() in _DECODED_BY_PROXY:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


class HeaderGuard:
    """Pure ASGI middleware: rewrites the request's headers, nothing else."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") == "http":
            headers = scope.get("headers") or []
            kept = [(name, value) for name, value in headers if _keep(name, value)]
            if len(kept) != len(headers):
                scope = dict(scope, headers=kept)
        await self.app(scope, receive, send)


def middlewares() -> list:
    from starlette.middleware import Middleware  # here: PROXY_GUARD_ENV's importers need no starlette

    return [Middleware(HeaderGuard)]
