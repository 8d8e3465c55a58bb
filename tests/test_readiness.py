"""/readyz from a cache (app/http/readiness.py): ready only with every stage up, and cheap under probes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

from app.http.readiness import ReadinessCache, missing_stages
from app.ops.telemetry import gpu_snapshot


def test_ready_only_when_every_stage_has_a_running_replica():
    up = {"Ingress": 1, "Preprocessor": 2, "OCRModel": 4, "Postprocessor": 1}
    assert missing_stages(up) == []
    assert missing_stages(up | {"Preprocessor": 0}) == ["Preprocessor"]
    assert missing_stages(up | {"Postprocessor": 0, "Ingress": 0}) == ["Ingress", "Postprocessor"]
    assert missing_stages({}) == ["(application not found)"]


def test_cache_fetches_once_per_refresh_period_under_a_flood_of_probes():
    fetched_at = []

    async def fetch():
        fetched_at.append(time.monotonic())
        await asyncio.sleep(0.05)
        return {"replicas": {"OCRModel": len(fetched_at)}}

    async def flood():
        cache = ReadinessCache(fetch, refresh_s=0.5)
        first = await cache.snapshot(first_wait_s=2)  # the first probe waits for a snapshot to exist
        answers = [first]
        for _ in range(200):  # 200 probes over 2 s: 100 per second
            answers.append(await cache.snapshot(first_wait_s=2))
            await asyncio.sleep(0.01)
        return cache, answers

    cache, answers = asyncio.run(flood())
    assert answers[0] == {"replicas": {"OCRModel": 1}}
    assert 3 <= cache.fetches <= 6, cache.fetches  # about 2.2 s / 0.5 s, never one per probe
    gaps = [b - a for a, b in zip(fetched_at, fetched_at[1:])]
    assert min(gaps) >= 0.5, gaps
    assert answers[-1]["replicas"]["OCRModel"] >= cache.fetches - 1  # probes see fresh snapshots, not the first


def test_a_failed_refresh_keeps_the_last_snapshot():
    calls = []

    async def fetch():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("controller busy")
        return {"replicas": {"OCRModel": 1}}

    async def run():
        cache = ReadinessCache(fetch, refresh_s=0.5)
        first = await cache.snapshot(1)
        await asyncio.sleep(0.6)
        await cache.snapshot(1)
        await asyncio.sleep(0.05)
        return first, await cache.snapshot(1)

    first, later = asyncio.run(run())
    assert first == later == {"replicas": {"OCRModel": 1}} and len(calls) == 2


def test_readyz_under_50_probes_per_second_calls_serve_status_rarely(client):
    """The figure of issue 10: serve.status() calls of the ingress replica while /readyz is flooded."""
    before = client.get("/readyz").json()["checks"]["status_calls"]
    duration_s, rate = 10.0, 50
    started = time.monotonic()

    def probe(i: int) -> int:
        time.sleep(max(0.0, started + i / rate - time.monotonic()))  # a fixed arrival rate
        return client.get("/readyz").status_code

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(probe, range(int(duration_s * rate))))
    elapsed = time.monotonic() - started
    after = client.get("/readyz").json()["checks"]["status_calls"]
    per_minute = (after - before) * 60 / elapsed
    print(f"/readyz: {len(codes)} probes in {elapsed:.1f}s, {after - before} serve.status calls "
          f"= {per_minute:.0f}/min at {len(codes) / elapsed:.0f} probes/s")
    assert codes.count(200) == len(codes)
    assert after - before <= elapsed / 5 + 2, after - before  # refresh_s 5: at most one call per 5 s


class FakeNVML:
    """Three GPUs with different memory use, found by index or by UUID, as NVML finds them."""

    def __init__(self):
        self.gpus = {0: ("GPU-aaaa", 1), 1: ("GPU-bbbb", 2), 2: ("GPU-cccc", 3)}

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return next(i for i, (u, _) in self.gpus.items() if u == uuid)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = self.gpus[handle][1] * 2**30
        return type("Memory", (), {"used": used, "total": 80 * 2**30})()

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": 10 * handle})()


def test_gpu_telemetry_is_of_the_gpu_ray_assigned():
    nvml = FakeNVML()
    assert gpu_snapshot("2", nvml)["memory_used_mib"] == 3 * 1024  # index 2 is not index 0
    assert gpu_snapshot("GPU-bbbb", nvml)["memory_used_mib"] == 2 * 1024
    assert gpu_snapshot("GPU-bbbb", nvml)["utilisation_pct"] == 10
    assert gpu_snapshot(None, nvml) is None  # no GPU assigned: nothing to report
    assert gpu_snapshot("GPU-none", nvml) is None  # unknown: logged, not raised
