"""The client's side of the wire: one HTTP client that retries what a busy or restarting service asks it
to, follows only its own origin, never sends a key in clear to another machine, and reads a job's
Server-Sent Events (httpx-sse), resuming after a dropped connection with Last-Event-ID."""

from __future__ import annotations

import json
import ssl
import time
from typing import Iterator, Optional, Union
from urllib.parse import urlsplit

import httpx

from app.loopback import is_loopback


def terminal_safe(text: str) -> str:
    """Server text for a terminal: no escape sequences or other control characters (tabs and newlines kept)."""
    return "".join(ch for ch in str(text) if ch in "\t\n" or (ch >= " " and not 0x7f <= ord(ch) <= 0x9f))


def check_transport(url: str, api_key: Optional[str], insecure: bool) -> None:
    """Refuse to send a key in clear over the network: http:// is for loopback only, unless --insecure."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise SystemExit(f"error: --url {url}: http:// or https:// only")
    if api_key and parts.scheme == "http" and not is_loopback(parts.hostname or "") and not insecure:
        raise SystemExit(f"error: --url {url} would send the API key in clear to another machine. Use https:// "
                         "(with --ca-bundle for the fleet's own CA), or --insecure if the network is trusted.")


class EventsUnavailable(Exception):
    """The service has no event stream for this job now (an older service, or its stream slots are taken)."""


class Client:
    def __init__(self, url: str, api_key: Optional[str], timeout_s: float = 120.0, give_up_after_s: float = 600.0,
                 poll_s: float = 1.0, verify: Union[ssl.SSLContext, bool] = True):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s, verify=verify,
                                  follow_redirects=False)
        self._origin = urlsplit(url)[:2]
        self._give_up_after_s = give_up_after_s
        self.poll_s = poll_s

    def _own(self, path: str) -> str:
        """`path` may come from the server (a job's status_url): only a path on this origin is followed."""
        target = urlsplit(path)
        if (target.scheme or target.netloc) and target[:2] != self._origin or not target.path.startswith("/"):
            raise ValueError(f"the server pointed at {terminal_safe(path)[:200]!r}, off the --url's origin: "
                             "not followed")
        return path

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One call; 503/429 wait their Retry-After, a service that is down or restarting is waited for."""
        path = self._own(path)
        started, attempt = time.monotonic(), 0
        while True:
            failure: Optional[httpx.TransportError] = None
            try:
                response = self._http.request(method, path, **kwargs)
                if response.status_code not in (429, 503):
                    return response
                delay = retry_after(response)
            except httpx.TransportError as exc:
                if certificate_refused(exc):
                    raise  # waiting does not make a wrong certificate right
                failure, delay = exc, min(2.0 ** attempt, 10.0)
            if time.monotonic() - started + delay > self._give_up_after_s:
                if failure is not None:  # the last attempt reached no service: say so, not a stale answer
                    raise failure
                return response
            attempt += 1
            time.sleep(delay)

    def events(self, path: str) -> Iterator[tuple[str, dict]]:
        """(event, data) of a job's event stream until its end event; a dropped stream is picked up again
        after the last event seen. EventsUnavailable where there is no stream to read."""
        from httpx_sse import SSEError, connect_sse

        path, last_id, drops = self._own(path), None, 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with connect_sse(self._http, "GET", path, headers=headers,
                                 timeout=httpx.Timeout(self._http.timeout.connect, read=120)) as source:
                    if source.response.status_code != 200:
                        raise EventsUnavailable(f"HTTP {source.response.status_code}")
                    for sse in source.iter_sse():
                        last_id = sse.id or last_id
                        yield sse.event, json.loads(sse.data)
                        if sse.event == "end":
                            return
            except (httpx.TransportError, SSEError) as exc:
                if certificate_refused(exc) or drops >= 5:
                    raise EventsUnavailable(f"{type(exc).__name__}") from exc
                drops += 1
                time.sleep(min(2.0 ** drops, 10.0))

    def close(self) -> None:
        self._http.close()


def certificate_refused(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", "2")), 0.5), 60.0)
    except ValueError:
        return 2.0


def error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return terminal_safe(f"{response.status_code} {error['code']}: {error['message']}")
    except (ValueError, KeyError, TypeError):
        return terminal_safe(f"{response.status_code}: {response.text[:200]}")
