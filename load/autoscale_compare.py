"""The OCR autoscaling policies side by side on the same load step, on a 3-node Ray cluster here.

    python load/autoscale_compare.py [--rounds 3] [--report load/results/autoscale_compare.json]
    python load/autoscale_compare.py --render load/results/autoscale_compare.json

A head and two workers (4 CPUs and one logical GPU each, on this machine) run the application
with the fleet's shipped batching (8 pages x 2 concurrent batches: a capacity of 16 pages a
replica) and PP-OCR on one thread per replica, 1 to 3 OCR replicas, at most one per node.
Each round deploys each policy in turn, fresh (the order alternates by round):
  - service_rate: replicas to clear the pages in flight within target_queue_wait_s (10 s) at
    the seconds per page the replicas measure;
  - queue_capacity: one replica per 16 pages in flight.
Each arm is warmed the same way (WARM_PAGES pages one at a time, which also gives the
service_rate replica its first measurement), then gets the same open-loop load: BASE times one
replica's rate for BASE_S, STEP times it for STEP_S, then QUIET_S without requests. One
replica's rate is measured once before the rounds (sequential requests to a lone replica) and
then fixed for every arm. The page is a devset
page of dense print (PAGE), seconds of PP-OCR on one thread: the case where a fixed capacity
of 16 pages a replica means a long queue before a second replica is asked for. Every 200 must read what
the arm's first request read.
Per arm:
  - seconds from the step's start until the OCR replica count first rises, and until it
    reaches its peak (replicas sampled every second through serve.status());
  - p50/p95 latency of the requests started during the step (their 200s), with 503s, other
    failures and late starts beside;
  - OCR replica-seconds over the arm's whole load (the integral of running replicas).
Raw samples and the settings go to the JSON report; the table is its --render.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

os.environ.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
os.environ.setdefault("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.cluster_scale import start_serve, start_three_nodes  # noqa: E402
from load.common import add_report_options, commit, machine, measure_or_render, spread_cell, summary  # noqa: E402
from load.stepload import StepLoad, to_json, window  # noqa: E402

POLICIES = ("service_rate", "queue_capacity")
# The load, in multiples of what one replica clears (measured once, before the rounds, and then
# fixed for every arm): a light base, then a step one replica cannot keep up with.
BASE, STEP = 0.2, 2.0
BASE_S, STEP_S, QUIET_S = 10.0, 60.0, 20.0
WARM_PAGES = 3
MIN_REPLICAS, MAX_REPLICAS = 1, 3
PAGE = "pages/kant_aufklaerung_1784_0020.tif"  # a full page of the devset: ~5 s of PP-OCR on one thread


def app_args(policy: str) -> dict:
    return {
        "engine": "ppocr", "engine_threads": 1, "ocr_num_cpus": 1, "ocr_num_gpus": 0.25,
        "ocr_max_replicas_per_node": 1,
        "ocr_autoscaling": {"min_replicas": MIN_REPLICAS, "max_replicas": MAX_REPLICAS, "upscale_delay_s": 2,
                            "downscale_delay_s": 10, "look_back_period_s": 11, "policy": policy,
                            "target_queue_wait_s": 10},
        "batching": {"max_batch_size": 8, "batch_wait_timeout_s": 0.05, "max_concurrent_batches": 2},
        "max_inflight_requests": 64, "max_queued_pages": 256,
    }


def page() -> bytes:
    from load.common import DEFAULT_MANIFEST

    return (DEFAULT_MANIFEST.parent / PAGE).read_bytes()


def replica_seconds(replicas: list[tuple[float, dict]], start: float, end: float) -> float:
    """The integral of running OCR replicas over [start, end], from the samples (step-wise)."""
    total, previous = 0.0, None
    for t, counts in replicas:
        if previous is not None:
            a, b = max(previous[0], start), min(t, end)
            if b > a:
                total += (b - a) * previous[1]
        previous = (t, counts.get("OCRModel", 0))
    return round(total, 1)


def arm_result(run, step_at: float, quiet_at: float, end: float) -> dict:
    counts = [(t, c.get("OCRModel", 0)) for t, c in run.replicas]
    before = max((n for t, n in counts if t <= step_at), default=MIN_REPLICAS)
    after = [(t, n) for t, n in counts if t >= step_at]
    peak = max((n for _, n in after), default=before)
    first_up = next((t for t, n in after if n > before), None)
    at_peak = next((t for t, n in after if n >= peak), None) if peak > before else None
    return {
        "replicas_before": before, "peak_replicas": peak,
        "s_to_first_scale_up": None if first_up is None else round(first_up - step_at, 1),
        "s_to_peak": None if at_peak is None else round(at_peak - step_at, 1),
        "step": window(run, step_at, quiet_at),
        "replica_seconds": replica_seconds(run.replicas, 0.0, end),
        "all": window(run, 0.0, float("inf")),
    }


def post(url: str, payload: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/ocr", files={"file": ("page.tif", payload, "image/tiff")}, timeout=300)


def one_replica_seconds_per_page(url: str, payload: bytes) -> float:
    """What one OCR replica takes for the page, alone: the median of 4 sequential requests after one."""
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    deploy(build_app(app_args("queue_capacity")), name="ocr", timeout_s=300)
    try:
        post(url, payload)
        latencies = []
        for _ in range(4):
            started = time.perf_counter()
            post(url, payload).raise_for_status()
            latencies.append(time.perf_counter() - started)
        return statistics.median(latencies)
    finally:
        serve.delete("ocr")


def run_arm(policy: str, url: str, payload: bytes, rates: tuple[float, float]) -> dict:
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    deploy(build_app(app_args(policy)), name="ocr", timeout_s=300)
    try:
        reference = post(url, payload).json()["text"]  # what every 200 must read
        load = StepLoad(url, payload, lambda body: body["text"] == reference, sample_replicas=True,
                        filename="page.tif", content_type="image/tiff")
        load.run([(1.0 / 3.0, 3.0 * (WARM_PAGES - 1))])  # the same warm-up for every arm: one page at a time
        base, step = rates
        run = load.run([(base, BASE_S), (step, STEP_S), (0.0, QUIET_S)])
        step_at, quiet_at = BASE_S, BASE_S + STEP_S
        end = max([t for t, _ in run.replicas] + [quiet_at + QUIET_S])
        return {**arm_result(run, step_at, quiet_at, end), "raw": to_json(run)}
    finally:
        serve.delete("ocr")


def measure(options) -> dict:
    import ray
    from ray import serve

    cluster, _ = start_three_nodes()
    arms: dict = {policy: [] for policy in POLICIES}
    try:
        url = start_serve()
        payload = page()
        seconds_per_page = one_replica_seconds_per_page(url, payload)
        rates = (round(BASE / seconds_per_page, 3), round(STEP / seconds_per_page, 3))
        print(f"one replica: {seconds_per_page:.2f} s a page; load {rates[0]} then {rates[1]} requests/s", flush=True)
        for round_index in range(options.rounds):
            order = POLICIES if round_index % 2 == 0 else tuple(reversed(POLICIES))
            for policy in order:
                result = run_arm(policy, url, payload, rates)
                arms[policy].append(result)
                step = result["step"]
                print(f"round {round_index + 1} {policy}: first scale-up {result['s_to_first_scale_up']} s, "
                      f"peak {result['peak_replicas']} at {result['s_to_peak']} s, step p95 {step['p95_s']} s "
                      f"({step['ok']} ok, {step['status_503']} 503, {step['failed']} failed), "
                      f"{result['replica_seconds']} replica-s", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    return {
        "benchmark": "autoscale_compare", "commit": commit(), "machine": machine(),
        "settings": {"rounds": options.rounds, "nodes": 3, "policies": list(POLICIES),
                     "one_replica_seconds_per_page": round(seconds_per_page, 3),
                     "load_in_one_replicas_rate": {"base": BASE, "step": STEP},
                     "load_requests_per_s": {"base": rates[0], "step": rates[1]},
                     "seconds": {"base": BASE_S, "step": STEP_S, "quiet": QUIET_S},
                     "warm_pages": WARM_PAGES, "args": {p: app_args(p) for p in POLICIES}},
        "arms": {policy: {
            "s_to_first_scale_up": spread([r["s_to_first_scale_up"] for r in results
                                            if r["s_to_first_scale_up"] is not None]),
            "never_scaled_up": sum(r["s_to_first_scale_up"] is None for r in results),
            "s_to_peak": spread([r["s_to_peak"] for r in results if r["s_to_peak"] is not None]),
            "peak_replicas": spread([r["peak_replicas"] for r in results]),
            "step_p95_s": spread([r["step"]["p95_s"] for r in results if r["step"]["p95_s"] is not None]),
            "step_p50_s": spread([r["step"]["p50_s"] for r in results if r["step"]["p50_s"] is not None]),
            "replica_seconds": spread([r["replica_seconds"] for r in results]),
            "step_requests": sum(r["step"]["requests"] for r in results),
            "step_ok": sum(r["step"]["ok"] for r in results),
            "step_correct": sum(r["step"]["correct"] for r in results),
            "step_503": sum(r["step"]["status_503"] for r in results),
            "step_failed": sum(r["step"]["failed"] for r in results),
            "step_late": sum(r["step"]["late"] for r in results),
            "rounds": results,
        } for policy, results in arms.items()},
    }


def spread(values: list) -> dict | None:
    """summary() of the rounds that have the figure; None where none has (it never scaled up)."""
    return summary(values) if values else None


def render(report: dict) -> str:
    def cell(stats: dict, digits: int = 1) -> str:
        return spread_cell(stats, digits)

    settings = report["settings"]
    lines = [
        f"OCR autoscaling policies on one open-loop step ({settings['load_requests_per_s']['base']} then "
        f"{settings['load_requests_per_s']['step']} requests/s for {settings['seconds']['step']:.0f} s: "
        f"{settings['load_in_one_replicas_rate']['base']}x then {settings['load_in_one_replicas_rate']['step']}x "
        f"what one replica cleared alone, {settings['one_replica_seconds_per_page']} s a page), "
        f"3 nodes, {settings['rounds']} interleaved rounds, commit `{report['commit']}`, "
        f"{report['machine']['cpus']} CPUs (median, min-max):",
        "",
        "| policy | s to first scale-up | s to peak | peak replicas | step p50 s | step p95 s "
        "| step requests: ok / 503 / failed / late | OCR replica-seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy, arm in report["arms"].items():
        never = f", never in {arm['never_scaled_up']}" if arm["never_scaled_up"] else ""
        lines.append(
            f"| `{policy}` | {cell(arm['s_to_first_scale_up'])}{never} | {cell(arm['s_to_peak'])} "
            f"| {cell(arm['peak_replicas'], 0)} | {cell(arm['step_p50_s'])} | {cell(arm['step_p95_s'])} "
            f"| {arm['step_requests']}: {arm['step_ok']} / {arm['step_503']} / {arm['step_failed']} / "
            f"{arm['step_late']} | {cell(arm['replica_seconds'], 0)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    add_report_options(parser, "autoscale_compare.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: measure(options), render, passed=lambda report: True)


if __name__ == "__main__":
    sys.exit(main())
