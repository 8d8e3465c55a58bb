"""A bounded, headless, open-loop step-load runner: offered load, replicas, latency and errors over time.

    python load/stepload.py --url http://127.0.0.1:8000 --steps 2x20,8x40,0x60 --ray-address auto \
        --report load/out/step.json --plot load/out/step.png

Each step is RATExSECONDS: requests start at a fixed rate (RATE per second, evenly spaced) for
that long, whatever the service answers (RATE 0: a quiet period). Open loop: a client that
backs off after a 503 would lower the load it measures, and a flood would throttle itself.
A request that could not start within 0.1 s of its slot (the runner itself fell behind) is
counted as `late`. Everything stops by itself after the last step and the answers still
outstanding (at most the request timeout). With --ray-address, running replicas per deployment
are sampled every second through serve.status(). Every 200 is checked for the expected text;
anything else is counted by status code, beside the percentiles (which are of the 200s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load.common import percentile  # noqa: E402

LATE_S = 0.1
TIMEOUT_S = 120.0


@dataclass
class Sample:
    started: float  # seconds since the run began
    latency: float
    status: int  # HTTP status; 0 for a connection error or timeout
    correct: bool
    late: bool = False  # started more than LATE_S after its slot


@dataclass
class Run:
    steps: list[tuple[float, float]]
    samples: list[Sample] = field(default_factory=list)
    replicas: list[tuple[float, dict]] = field(default_factory=list)
    offered: list[tuple[float, float]] = field(default_factory=list)  # (time, requests per second)
    events: list[tuple[float, str]] = field(default_factory=list)


def parse_steps(text: str) -> list[tuple[float, float]]:
    steps = []
    for part in text.split(","):
        rate, _, seconds = part.partition("x")
        steps.append((float(rate), float(seconds)))
    return steps


def replica_counts(app_name: str = "ocr") -> dict:
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return {}
    return {name: int(d.replica_states.get("RUNNING", 0)) for name, d in app.deployments.items()}


class StepLoad:
    """Runs the steps against url; `check(response_json) -> bool` judges each 200."""

    def __init__(self, url: str, payload: bytes, check: Callable[[dict], bool], sample_replicas: bool,
                 app_name: str = "ocr", filename: str = "p.png", content_type: str = "image/png"):
        self.url, self.payload, self.check = url, payload, check
        self.sample_replicas, self.app_name = sample_replicas, app_name
        self.file = (filename, payload, content_type)

    def run(self, steps: list[tuple[float, float]], on_step: Optional[Callable[[int, Run], None]] = None) -> Run:
        run, t0 = Run(steps=steps), time.monotonic()
        stop_sampling = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(run, t0, stop_sampling), daemon=True)
        sampler.start()
        try:
            asyncio.run(self._arrivals(run, t0, steps, on_step))
        finally:
            stop_sampling.set()
            sampler.join()
        return run

    async def _arrivals(self, run: Run, t0: float, steps, on_step) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=TIMEOUT_S, limits=limits) as client:
            requests: list[asyncio.Task] = []
            step_start = time.monotonic()
            for index, (rate, seconds) in enumerate(steps):
                run.offered.append((step_start - t0, rate))
                if on_step:
                    on_step(index, run)
                count = int(round(rate * seconds))
                for i in range(count):
                    slot = step_start + i / rate
                    await asyncio.sleep(max(0.0, slot - time.monotonic()))
                    requests.append(asyncio.create_task(self._one(client, run, t0, slot)))
                step_start += seconds
                await asyncio.sleep(max(0.0, step_start - time.monotonic()))
            run.offered.append((time.monotonic() - t0, 0.0))
            if requests:
                await asyncio.wait(requests)

    async def _one(self, client: httpx.AsyncClient, run: Run, t0: float, slot: float) -> None:
        started = time.monotonic()
        status, correct = 0, False
        try:
            response = await client.post(f"{self.url}/v1/ocr", files={"file": self.file})
            status = response.status_code
            correct = status == 200 and self.check(response.json())
        except (httpx.HTTPError, ValueError):
            pass
        run.samples.append(Sample(slot - t0, time.monotonic() - started, status, correct, started - slot > LATE_S))

    def _sample(self, run: Run, t0: float, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            if self.sample_replicas:
                try:
                    run.replicas.append((time.monotonic() - t0, replica_counts(self.app_name)))
                except Exception:  # the controller may be busy during a node loss
                    pass


def window(run: Run, start: float, end: float) -> dict:
    samples = [s for s in run.samples if start <= s.started < end]
    ok = [s.latency for s in samples if s.status == 200]
    return {
        "requests": len(samples),
        "ok": len(ok),
        "correct": sum(s.correct for s in samples),
        "status_503": sum(s.status == 503 for s in samples),
        "failed": sum(s.status not in (200, 503) for s in samples),
        "other_statuses": sorted({s.status for s in samples} - {200, 503}),
        "late": sum(s.late for s in samples),
        "p50_s": percentile(ok, 0.50),
        "p95_s": percentile(ok, 0.95),
        "p99_s": percentile(ok, 0.99),
    }


def to_json(run: Run) -> dict:
    return {
        "steps": run.steps,
        "offered": run.offered,
        "replicas": run.replicas,
        "events": run.events,
        "samples": [[round(s.started, 3), round(s.latency, 4), s.status, s.correct, s.late] for s in run.samples],
    }


def plot(run: Run, path: Path, title: str = "step load") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    times = [t for t, _ in run.offered]
    axes[0].step(times, [c for _, c in run.offered], where="post")
    axes[0].set_ylabel("requests/s offered")
    for name in sorted({n for _, counts in run.replicas for n in counts}):
        axes[1].plot([t for t, c in run.replicas], [c.get(name, 0) for _, c in run.replicas], label=name)
    axes[1].set_ylabel("running replicas")
    axes[1].legend(fontsize=8)
    end = max([s.started for s in run.samples] + [times[-1]])
    buckets = [(b, b + 5.0) for b in range(0, int(end) + 5, 5)]
    centres = [a + 2.5 for a, _ in buckets]
    stats = [window(run, a, b) for a, b in buckets]
    for q in ("p50_s", "p95_s", "p99_s"):
        axes[2].plot(centres, [s[q] if s[q] is not None else float("nan") for s in stats], label=q[:3])
    axes[2].set_ylabel("latency (s)")
    axes[2].legend(fontsize=8)
    axes[3].plot(centres, [s["failed"] / s["requests"] if s["requests"] else 0 for s in stats], label="errors")
    axes[3].plot(centres, [s["status_503"] / s["requests"] if s["requests"] else 0 for s in stats], label="503")
    axes[3].set_ylabel("share of requests")
    axes[3].set_xlabel("seconds")
    axes[3].legend(fontsize=8)
    for t, label in run.events:
        for axis in axes:
            axis.axvline(t, color="grey", linestyle=":")
        axes[0].annotate(label, (t, 0), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--steps", default="2x20,8x40,0x60", help="RATExSECONDS,...: requests per second, seconds")
    parser.add_argument("--image", type=Path, help="image to send (default: a rendered text line)")
    parser.add_argument("--expect", default="", help="text every 200 must contain (case-insensitive)")
    parser.add_argument("--ray-address", help="sample replicas through serve.status() on this cluster")
    parser.add_argument("--report", type=Path, default=Path("load/out/step.json"))
    parser.add_argument("--plot", type=Path, default=Path("load/out/step.png"))
    options = parser.parse_args()
    if options.ray_address:
        import ray

        ray.init(address=options.ray_address, log_to_driver=False)
    if options.image:
        payload = options.image.read_bytes()
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from app.synthetic import png_bytes, render_text_page

        payload = png_bytes(render_text_page(["Step load 4711"], width=600))
        options.expect = options.expect or "step load 4711"
    expect = options.expect.lower()
    load = StepLoad(options.url, payload, lambda body: expect in body["text"].lower(), bool(options.ray_address))
    run = load.run(parse_steps(options.steps))
    report = {"summary": window(run, 0, float("inf")), **to_json(run)}
    options.report.parent.mkdir(parents=True, exist_ok=True)
    options.report.write_text(json.dumps(report))
    plot(run, options.plot)
    print(json.dumps(report["summary"], indent=1))
    print(f"report: {options.report}  plot: {options.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
