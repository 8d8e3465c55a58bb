"""An ingress replica's counts of its long-lived job requests: who holds how many uploads, long-polls and
event streams (against a replica-wide and a per-client limit), and the bytes of job uploads held in memory."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Callable, Optional

from app.errors import QuotaExceeded, ServiceUnavailable


class Holders:
    """Who holds how many of one kind of request slot on this replica, against a replica and a client limit."""

    def __init__(self, what: str, limit: int, quota: str):
        self._what, self._limit, self._quota = what, limit, quota
        self._held: Counter[str] = Counter()

    def admits(self, client: str, client_limit: int) -> bool:
        return sum(self._held.values()) < self._limit and self._held[client] < client_limit

    def check(self, client: str, client_limit: int) -> None:
        """Refuse (503 replica-wide, 429 for the client) where one more would pass a limit."""
        if sum(self._held.values()) >= self._limit:
            raise ServiceUnavailable(f"This replica is holding {self._limit} {self._what} already; retry.",
                                     code="overloaded", retry_after_s=2)
        if self._held[client] >= client_limit:
            raise QuotaExceeded(f"Client {client!r} has {client_limit} {self._what} in progress here already "
                                f"(jobs.quotas.{self._quota}={client_limit}); send them one after another.",
                                retry_after_s=2)

    def take(self, client: str, client_limit: int) -> Callable[[], None]:
        """Check and hold one at once; the returned call lets it go (once, however often it is called)."""
        self.check(client, client_limit)
        self._held[client] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._let_go(client)

        return release

    @contextmanager
    def hold(self, client: str, client_limit: Optional[int] = None):
        """Hold one; with `client_limit`, refuse (check) instead of going past it."""
        if client_limit is not None:
            self.check(client, client_limit)
        self._held[client] += 1
        try:
            yield
        finally:
            self._let_go(client)

    def _let_go(self, client: str) -> None:
        self._held[client] -= 1
        if self._held[client] <= 0:
            del self._held[client]


class ByteBudget:
    """Bytes of job documents this replica holds in memory at once (read, counted, stored), against a cap.

    A submit reserves what it announces (Content-Length; the upload limit when it announces nothing)
    before a byte is read, and gives it back when it is answered: 16 uploads of 500 MiB cannot
    take 8 GB of one replica's memory."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0

    @contextmanager
    def reserve(self, size: int):
        if self.held + size > self.limit:
            raise ServiceUnavailable(f"This replica holds {self.held} bytes of job uploads; {size} more would pass "
                                     f"jobs.max_upload_buffer_bytes={self.limit}. Retry shortly.",
                                     code="overloaded", retry_after_s=5)
        self.held += size
        try:
            yield
        finally:
            self.held -= size
