"""Callbacks when a job ends: `callback_url` on submit, POSTed the job's status, signed, retried.

Air-gapped rooms call back into their own systems only, so a callback_url must name a receiver in
`jobs.callbacks.allowed_hosts` (app/jobs/callback_policy.py), checked at submit (400 otherwise) and
again before each delivery, where the host is resolved once, the address checked, and the connection
made to that address; redirects are not followed. Each POST carries `X-OCR-Signature:
t=TIMESTAMP,v1=HEX`, HEX being HMAC-SHA256 with the receiver's key over `TIMESTAMP.` followed by the
body, so a receiver can check who sent it and refuse a replay (docs/api.md shows the check).

An attempt has one deadline for all of it (a receiver that answers a byte a second is cut there) and
reads at most 64 KiB of the answer. Deliveries run side by side: a slow receiver holds its own slot,
never the loop that takes the next due callback, and its claim on the store outlives its deadline, so
no other runner takes it over meanwhile. A delivery that does not get a 2xx is tried again after
`backoff_s`, doubled each time, up to `max_attempts`; the job's owner sees only the outcome's class
(`timeout`, `connection_failed`, ...), never the connection's error text (a port scanner's oracle).
At least once: `X-OCR-Job` lets a receiver drop a repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import socket
import time
from typing import Optional

import httpx

from app.errors import BadRequest
from app.jobs.callback_policy import AddressRefused, Secrets, Target, allowed_target, allowed_url, checked_address
from app.jobs.model import CALLBACK_PENDING, Job, iso, job_tag, status_body
from app.settings.jobs import Callbacks

__all__ = ["CallbackSender", "allowed_url", "signature"]
logger = logging.getLogger("ray.serve")
SIGNATURE_HEADER = "X-OCR-Signature"
MAX_BACKOFF_S = 300.0
MAX_ANSWER_BYTES = 64 * 1024
CLAIM_MARGIN_S = 30.0  # a claim outlives its attempt's deadline by this much


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class CallbackSender:
    """Delivers due callbacks from the store, up to `concurrency` at once, in the runner's event loop."""

    def __init__(self, settings: Callbacks, store, base_path: str = "/v1/jobs", concurrency: int = 8):
        self._settings = settings
        self._store = store
        self._base = base_path
        self._secrets = Secrets(settings)  # refuses an empty key or one others may read: at start-up
        self._http = httpx.AsyncClient(verify=settings.ca_file or True, timeout=settings.timeout_s,
                                       follow_redirects=False, trust_env=False)
        self._concurrency = concurrency
        self._running: set[asyncio.Task] = set()
        self.stats = {"delivered": 0, "failed_attempts": 0, "given_up": 0}

    @property
    def enabled(self) -> bool:
        return bool(self._settings.allowed_hosts)

    async def run(self, poll_s: float) -> None:
        while True:
            try:
                await self.deliver_due()
            except Exception:
                logger.exception("delivering callbacks failed; trying again")
            await asyncio.sleep(poll_s)

    async def deliver_due(self) -> int:
        """Start a delivery for each callback due now, while a slot is free; the number started. It
        waits on none of them: the next poll takes what became due meanwhile."""
        started = 0
        while len(self._running) < self._concurrency:
            job = await asyncio.to_thread(self._store.claim_callback, self._settings.timeout_s + CLAIM_MARGIN_S)
            if job is None:
                break
            task = asyncio.get_running_loop().create_task(self._deliver(job))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            started += 1
        return started

    async def settle(self) -> None:
        """Wait for the deliveries under way (tests; shutting down)."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def _deliver(self, job: Job) -> None:
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
            target = allowed_target(job.callback_url, self._settings)  # the allowlist may have shrunk since
            headers = {"Content-Type": "application/json", "X-OCR-Event": "job.finished", "X-OCR-Job": job.id,
                       SIGNATURE_HEADER: signature(self._secrets.for_target(target), int(time.time()), raw)}
            code = await asyncio.wait_for(self._post(target, raw, headers), self._settings.timeout_s)
            error = None if 200 <= code < 300 else "http_status"
        except BadRequest:
            error, attempts = "not_allowed", self._settings.max_attempts  # never to be tried again
        except (AddressRefused, asyncio.TimeoutError, httpx.HTTPError, OSError) as exc:
            error = _error_class(exc)
            logger.warning("job %s: callback attempt %d: %s", job_tag(job.id), attempts, _detail(exc))
        return self._outcome(job, attempts, code, error)

    def _outcome(self, job: Job, attempts: int, code: Optional[int], error: Optional[str]):
        now = time.time()
        state = {"attempts": attempts, "last_status": code, "last_error": error, "last_attempt_at": iso(now)}
        if error is None:
            self.stats["delivered"] += 1
            return {"status": "delivered", **state, "delivered_at": iso(now)}, None
        self.stats["failed_attempts"] += 1
        if attempts >= self._settings.max_attempts:
            self.stats["given_up"] += 1
            logger.warning("job %s: callback given up after %d attempt(s): %s", job_tag(job.id), attempts, error)
            return {"status": "failed", **state}, None
        wait = min(MAX_BACKOFF_S, self._settings.backoff_s * 2 ** (attempts - 1))
        return {"status": "pending", **state, "next_attempt_at": iso(now + wait)}, now + wait

    async def _post(self, target: Target, raw: bytes, headers: dict) -> int:
        """Resolve once, check the address, connect to it (TLS still checks the host's name), read at
        most MAX_ANSWER_BYTES of the answer; the status code."""
        infos = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        address = checked_address(target, [info[4][0] for info in infos])
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        async with self._http.stream("POST", target.url_at(address), content=raw,
                                     headers={**headers, "Host": target.host_header}, extensions=extensions) as answer:
            read = 0
            async for piece in answer.aiter_raw():
                read += len(piece)
                if read >= MAX_ANSWER_BYTES:
                    break  # the status is all that counts; the rest is not read
            return answer.status_code

    async def close(self) -> None:
        for task in list(self._running):
            task.cancel()
        await self._http.aclose()


def _error_class(exc: BaseException) -> str:
    if isinstance(exc, AddressRefused):
        return "address_refused"
    if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)):
        return "timeout"
    return "connection_failed"


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
