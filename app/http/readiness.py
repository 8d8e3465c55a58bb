"""What /readyz answers from: replica counts cached per ingress replica, refreshed in the background.

`serve.status()` fetches every replica of the cluster (about 1,700 at fleet size), so a
probe must never call it. A probe reads the cache; when the cache is older than
`refresh_s`, that probe starts one refresh (never two at once) and still answers from
what is cached. Without probes nothing is fetched. Under any probe rate one ingress
replica calls `serve.status()` at most once per `refresh_s`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Optional

logger = logging.getLogger("ray.serve")


def missing_stages(replicas: dict[str, int]) -> list[str]:
    """Deployments of the application with no RUNNING replica: the service is ready iff this is empty."""
    if not replicas:
        return ["(application not found)"]
    return sorted(name for name, running in replicas.items() if running < 1)


def running_replicas(app_name: str) -> dict[str, int]:
    """RUNNING replicas per deployment of one application (a replica is RUNNING only after warm-up)."""
    from ray import serve

    status = serve.status().applications.get(app_name)
    if status is None:
        return {}
    return {name: int(deployment.replica_states.get("RUNNING", 0))
            for name, deployment in status.deployments.items()}


class ReadinessCache:
    def __init__(self, fetch: Callable[[], Awaitable[dict]], refresh_s: float):
        self._fetch = fetch
        self._refresh_s = refresh_s
        self._snapshot: Optional[dict] = None
        self._fetched_at = float("-inf")
        self._refreshing: Optional[asyncio.Task] = None
        self.fetches = 0  # how many times `fetch` ran: /readyz shows it, tests count it

    async def snapshot(self, first_wait_s: float) -> Optional[dict]:
        """The cached snapshot; the first call waits up to `first_wait_s` for one to exist."""
        if time.monotonic() - self._fetched_at >= self._refresh_s and self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._refresh())
        if self._snapshot is None and self._refreshing is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._refreshing), first_wait_s)
            except Exception:  # too slow or failed: answer not ready now, the refresh goes on
                pass
        return self._snapshot

    def age_s(self) -> Optional[float]:
        return None if self._snapshot is None else round(time.monotonic() - self._fetched_at, 2)

    async def _refresh(self) -> None:
        try:
            self.fetches += 1
            self._snapshot = await self._fetch()
        except Exception as exc:  # keep the last snapshot; the next probe after refresh_s tries again
            logger.warning("readiness refresh failed: %s", exc)
        finally:
            self._fetched_at = time.monotonic()
            self._refreshing = None
