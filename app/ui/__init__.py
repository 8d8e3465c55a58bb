"""The page at `/ui`: static files in the package, served by the ingress, speaking the public API only.

No build step and nothing from outside: plain HTML, CSS and JavaScript (app/ui/static). The page
is a client like any other, so it can do nothing a client cannot; what it needs from the server is
its files and a strict Content-Security-Policy (no inline script, no outside origin), so that text
from a document can never run even if it were ever inserted as HTML.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
PREFIX = "/ui"

# img-src: the page's own pictures (data: URLs from page_images=true, blob: URLs of a local file)
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data: blob:",
    "connect-src 'self'", "form-action 'none'", "frame-ancestors 'none'", "base-uri 'none'",
])
PAGE_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-cache"),
]


class PageHeaders:
    """ASGI middleware: the page's security headers on every answer under /ui (its errors included)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not _under_ui(scope):
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                names = {name for name, _ in PAGE_HEADERS}
                kept = [(name, value) for name, value in message.get("headers", []) if name.lower() not in names]
                message = {**message, "headers": kept + PAGE_HEADERS}
            await send(message)

        await self.app(scope, receive, with_headers)


def _under_ui(scope) -> bool:
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root):  # under a route prefix the path carries it
        path = path[len(root):]
    return path == PREFIX or path.startswith(PREFIX + "/")


def install(api: FastAPI) -> None:
    api.mount(PREFIX, StaticFiles(directory=STATIC, html=True), name="ui")
    api.add_middleware(PageHeaders)
