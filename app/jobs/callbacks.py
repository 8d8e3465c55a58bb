"""Callbacks when a job ends: `callback_url` on submit, POSTed the job's status, signed, retried.

Air-gapped rooms call back into their own systems only, so a callback_url must name a host in
`jobs.callbacks.allowed_hosts`, checked at submit (400 otherwise) and again before each delivery;
redirects are not followed. Each POST carries `X-OCR-Signature: t=TIMESTAMP,v1=HEX`, HEX being
HMAC-SHA256 with the key in `jobs.callbacks.secret_file` over `TIMESTAMP.` followed by the body, so a
receiver can check who sent it and refuse a replay (docs/api.md shows the check). A delivery that does
not get a 2xx is tried again after `backoff_s`, doubled each time, up to `max_attempts`; the outcome is
in the job's status (`callback`). Deliveries are taken from the store (`claim_callback`), so a runner
that dies mid-delivery leaves it to another: at least once, and `X-OCR-Job` lets a receiver drop a repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import httpx

from app.errors import BadRequest
from app.jobs.model import CALLBACK_PENDING, Job, iso, status_body
from app.jobs.settings import Callbacks

logger = logging.getLogger("ray.serve")
SIGNATURE_HEADER = "X-OCR-Signature"
MAX_URL = 2048
MAX_BACKOFF_S = 300.0


def allowed_url(url: str, settings: Callbacks) -> str:
    """The callback_url as given, if it names an allowed host; else 400 saying why."""
    if not settings.allowed_hosts:
        raise BadRequest("Callbacks are not enabled here: jobs.callbacks.allowed_hosts is empty.",
                         code="callback_not_allowed")
    parts = urlsplit(url) if len(url) <= MAX_URL else None
    try:
        port = parts.port if parts else None
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
        raise BadRequest(f"callback_url must be an http(s) URL of at most {MAX_URL} characters, without credentials.",
                         code="invalid_callback_url")
    host = parts.hostname.lower()
    port = port or (443 if parts.scheme == "https" else 80)
    if host not in settings.allowed_hosts and f"{host}:{port}" not in settings.allowed_hosts:
        raise BadRequest(f"callback_url's host {host}:{port} is not in jobs.callbacks.allowed_hosts.",
                         code="callback_not_allowed")
    return url


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class CallbackSender:
    """Delivers due callbacks from the store, a few at a time, in the runner's event loop."""

    def __init__(self, settings: Callbacks, store, base_path: str = "/v1/jobs", concurrency: int = 4):
        self._settings = settings
        self._store = store
        self._base = base_path
        self._secret = Path(settings.secret_file).read_bytes().strip() if settings.secret_file else b""
        self._http = httpx.AsyncClient(verify=settings.ca_file or True, timeout=settings.timeout_s,
                                       follow_redirects=False, trust_env=False)
        self._slots = asyncio.Semaphore(concurrency)
        self.stats = {"delivered": 0, "failed_attempts": 0, "given_up": 0}

    @property
    def enabled(self) -> bool:
        return bool(self._settings.allowed_hosts)

    async def run(self, poll_s: float) -> None:
        """Due callbacks delivered apart from a runner's claims, so a slow receiver delays no job."""
        while True:
            try:
                await self.deliver_due()
            except Exception:
                logger.exception("delivering callbacks failed; trying again")
            await asyncio.sleep(poll_s)

    async def deliver_due(self) -> int:
        """Take and deliver what is due now; the number taken."""
        taken = []
        while len(taken) < 16:
            job = await asyncio.to_thread(self._store.claim_callback, self._settings.timeout_s + 30)
            if job is None:
                break
            taken.append(asyncio.ensure_future(self._deliver(job)))
        if taken:
            await asyncio.gather(*taken)
        return len(taken)

    async def _deliver(self, job: Job) -> None:
        async with self._slots:
            state, due = await self.attempt(job)
        await asyncio.to_thread(self._store.record_callback, job.id, state, due)

    async def attempt(self, job: Job) -> tuple[dict, Optional[float]]:
        """One POST of the job's status: (its state for the job's status, when to try again or None)."""
        attempts = int((job.callback or CALLBACK_PENDING).get("attempts", 0)) + 1
        body = status_body(job, self._base)
        body.pop("callback", None)  # the delivery's own state is not news to its receiver
        raw = json.dumps(body, separators=(",", ":")).encode()
        code, error = None, None
        try:
            allowed_url(job.callback_url, self._settings)  # the allowlist may have shrunk since the submit
            headers = {"Content-Type": "application/json", "X-OCR-Event": "job.finished", "X-OCR-Job": job.id,
                       SIGNATURE_HEADER: signature(self._secret, int(time.time()), raw)}
            response = await self._http.post(job.callback_url, content=raw, headers=headers)
            code = response.status_code
            error = None if 200 <= code < 300 else f"HTTP {code}"
        except BadRequest as refused:
            error, attempts = refused.message, self._settings.max_attempts  # never to be tried again
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        now = time.time()
        state = {"attempts": attempts, "last_status": code, "last_error": error, "last_attempt_at": iso(now)}
        if error is None:
            self.stats["delivered"] += 1
            return {"status": "delivered", **state, "delivered_at": iso(now)}, None
        self.stats["failed_attempts"] += 1
        if attempts >= self._settings.max_attempts:
            self.stats["given_up"] += 1
            logger.warning("job %s: callback given up after %d attempt(s): %s", job.id, attempts, error)
            return {"status": "failed", **state}, None
        wait = min(MAX_BACKOFF_S, self._settings.backoff_s * 2 ** (attempts - 1))
        return {"status": "pending", **state, "next_attempt_at": iso(now + wait)}, now + wait

    async def close(self) -> None:
        await self._http.aclose()
