"""API keys on the OCR API: `Authorization: Bearer <key>` against a file of `name:sha256hex` lines.

The file holds digests, never keys, so it can be read by the service account and
copied with the config. A presented key is hashed and compared with every digest in
constant time (`hmac.compare_digest`), so neither the match nor its position leaks
through timing. Logs carry the key's name only.

    python -m app.http.auth add KEYS_FILE NAME     # prints a new key once, appends its digest
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import logging
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from app.errors import Unauthorized  # noqa: F401 (re-exported: the key check raises it)

logger = logging.getLogger("ray.serve")

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_.@-]{1,64}):(?P<digest>[0-9a-f]{64})$")
RELOAD_CHECK_S = 5.0  # how often the file's mtime is looked at: a rotated key takes effect within this


class KeyFileError(ValueError):
    pass


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_key_file(text: str, source: str = "api keys file") -> list[tuple[str, bytes]]:
    """(name, digest bytes) per line; blank lines and `#` comments are skipped; anything else is an error."""
    entries, names = [], set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise KeyFileError(f"{source} line {number}: expected NAME:SHA256HEX (64 lowercase hex digits)")
        if match["name"] in names:
            raise KeyFileError(f"{source} line {number}: the name {match['name']!r} appears twice")
        names.add(match["name"])
        entries.append((match["name"], bytes.fromhex(match["digest"])))
    if not entries:
        raise KeyFileError(f"{source} holds no keys: every /v1 request would be refused")
    return entries


class KeyRing:
    """The keys of one file, re-read when the file changes (a rotated key needs no restart)."""

    def __init__(self, path: str | os.PathLike):
        self._path = Path(path)
        self._entries: list[tuple[str, bytes]] = []
        self._mtime: Optional[int] = None
        self._checked = 0.0
        self._load()  # at start-up a missing or malformed file fails the replica, with the reason

    def _load(self) -> None:
        try:
            stat = self._path.stat()
            text = self._path.read_text()
        except OSError as exc:
            raise KeyFileError(f"auth.api_keys_file {self._path} cannot be read: {exc.strerror}") from None
        self._entries = parse_key_file(text, f"auth.api_keys_file {self._path}")
        self._mtime = stat.st_mtime_ns
        logger.info("API keys loaded from %s: %d key(s) (%s)", self._path, len(self._entries),
                    ", ".join(name for name, _ in self._entries))

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return
        self._checked = now
        try:
            if self._path.stat().st_mtime_ns != self._mtime:
                self._load()
        except (OSError, KeyFileError) as exc:  # keep the keys in force rather than lock everyone out
            logger.error("API keys file not reloaded, the previous keys stay in force: %s", exc)

    def name_of(self, authorization: Optional[str]) -> str:
        """The name of the key in an `Authorization` header; raise Unauthorized otherwise."""
        self._maybe_reload()
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("This API needs an API key: send the header 'Authorization: Bearer <key>'.")
        presented = hashlib.sha256(key.strip().encode("utf-8", "replace")).digest()
        found = None
        for name, expected in self._entries:  # no early exit: the time taken does not depend on the match
            if hmac.compare_digest(presented, expected):
                found = name
        if found is None:
            raise Unauthorized("The API key is not valid.")
        return found


class APIKeyMiddleware:
    """ASGI middleware: every `/v1/` path needs a valid key; /healthz and /readyz stay open.

    A pure ASGI middleware rather than Starlette's BaseHTTPMiddleware, which buffers and
    wraps the request stream that the upload deadline in the ingress relies on.
    """

    PROTECTED_PREFIX = "/v1/"

    def __init__(self, app, keyring: Callable[[], Optional[KeyRing]]):
        self._app = app
        self._keyring = keyring

    @classmethod
    def _protected(cls, scope) -> bool:
        # Under a route prefix (Serve's root_path) the path carries the prefix: judge what follows it.
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        return path.startswith(cls.PROTECTED_PREFIX) or path.rstrip("/") == "/v1"

    async def __call__(self, scope, receive, send):
        keyring = self._keyring()
        if scope["type"] != "http" or keyring is None or not self._protected(scope):
            return await self._app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            name = keyring.name_of(headers.get("authorization"))
        except Unauthorized as error:
            from app.http.error_boundary import error_response, request_id_for

            logger.info("refused %s %s: 401 unauthorized", log_safe(scope.get("method")), log_safe(scope["path"]))
            response = error_response(error, request_id_for(scope), headers={"WWW-Authenticate": 'Bearer realm="ocr"'})
            return await response(scope, receive, send)
        scope.setdefault("state", {})["api_client"] = name
        return await self._app(scope, receive, send)


def log_safe(text, limit: int = 200) -> str:
    """A client's text for a log line: control and non-ASCII characters escaped (a decoded %0A cannot
    start a forged line), and cut at `limit`."""
    escaped = str(text).encode("ascii", "backslashreplace").decode("ascii")
    escaped = "".join(ch if " " <= ch <= "~" else f"\\x{ord(ch):02x}" for ch in escaped)
    return escaped if len(escaped) <= limit else escaped[:limit] + "..."


def add_key(path: Path, name: str) -> str:
    """Append a new random key's digest under `name`; return the key (shown once, stored nowhere)."""
    existing = path.read_text() if path.exists() else ""
    if existing.strip():
        taken = {entry for entry, _ in parse_key_file(existing, str(path))}
        if name in taken:
            raise KeyFileError(f"{path} already has a key named {name!r}")
    key = secrets.token_urlsafe(32)
    line = f"{name}:{digest(key)}\n"
    if existing and not existing.endswith("\n"):
        line = "\n" + line
    parse_key_file(line, "the new line")  # the name must be one the service accepts
    with open(path, "a") as handle:
        handle.write(line)
    return key


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="make a key for a client; prints it once")
    add.add_argument("keys_file", type=Path)
    add.add_argument("name", help="the client's name, as logs will show it (letters, digits, _.@-)")
    options = parser.parse_args(argv)
    try:
        print(add_key(options.keys_file, options.name))
    except KeyFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
