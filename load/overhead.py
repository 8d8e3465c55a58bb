"""The service's own overhead against Ray Serve's floor, in one run on one Ray instance.

    python load/overhead.py [--rounds 3] [--requests 40] [--clients 16] [--seconds 10]
    python load/overhead.py --throughput-optimized both [--rounds 3]
    python load/overhead.py --render load/results/overhead.json

Two applications side by side:
  - graph: the whole service (Ingress -> Preprocessor -> OCRModel -> Postprocessor) with the
    `null` engine, which reads nothing at once: what is left is the pipeline;
  - floor: four no-op deployments in a chain (an HTTP ingress and three hops that hand the
    body on), the least any four-deployment Serve graph costs on this machine.
Both get the same small PNG page. Each round measures each arm's latency (sequential
requests, p50/p95) and its most requests per second (closed loop of --clients clients for
--seconds), the arms' order alternating by round, after the same warm-up. Every answer
that is not a 200 is counted: 503s apart, the rest as failures.

`--throughput-optimized both` runs each round twice, in fresh Ray instances, with Serve's
RAY_SERVE_THROUGHPUT_OPTIMIZED off and on (the order alternating by round; on, with the
replicas' gRPC message cap raised to 32 MiB, which raw pages need), and reports both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.clients import Upload, closed_loop, closed_loop_for, tally  # noqa: E402
from load.common import add_report_options, commit, local_service, machine, measure_or_render, percentile, summary  # noqa: E402

THROUGHPUT_OPTIMIZED_ENV = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
                            "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(32 * 2**20)}
TARGET_P50_RATIO = 1.5  # issue 13: the graph adds at most 1.5x the floor's p50
# Structure off: with the null engine nothing hides the layout model's ~400 ms a page, which would be
# measured instead of the pipeline (load/structure.py measures the structure model).
GRAPH_ARGS = {"engine": "null", "ocr_replicas": 1, "engine_threads": 1, "structure": {"mode": "off"}}


def graph_args(batch_wait_s: float | None) -> dict:
    return GRAPH_ARGS if batch_wait_s is None else {**GRAPH_ARGS, "batching": {"batch_wait_timeout_s": batch_wait_s}}


def floor_app():
    """Ingress -> Hop1 -> Hop2 -> Hop3: every hop hands the bytes on, the last one counts them."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    # As many requests in flight as the graph's deployments take: the floor is Serve's cost, not a queue.
    @serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
    class Hop:
        def __init__(self, next_hop=None):
            self._next = next_hop

        async def __call__(self, data: bytes) -> int:
            return len(data) if self._next is None else await self._next.remote(data)

    @serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
    class FloorIngress:
        def __init__(self, first_hop):
            self._first = first_hop

        async def __call__(self, request: Request) -> JSONResponse:
            return JSONResponse({"bytes": await self._first.remote(await request.body())})

    last = Hop.options(name="Hop3").bind()
    return FloorIngress.bind(Hop.options(name="Hop1").bind(Hop.options(name="Hop2").bind(last)))


def page() -> bytes:
    from app.synthetic import png_bytes, render_text_page

    return png_bytes(render_text_page(["Overhead 0123456789"], width=400, font_size=24))


def latency(url: str, path: str, body: bytes, requests: int) -> dict:
    """Sequential requests: their outcome, and the seconds of each 200."""
    answers, _ = closed_loop(url, [Upload(body, "image/png", multipart=False)] * requests, 1, path, timeout_s=60)
    return tally(answers) | {"seconds": [answer.seconds for answer in answers if answer.ok]}


def throughput(url: str, path: str, body: bytes, clients: int, seconds: float) -> dict:
    answers, elapsed = closed_loop_for(url, Upload(body, "image/png", multipart=False), clients, seconds, path)
    counts = tally(answers)
    return counts | {"req_per_s": counts["ok"] / elapsed}


def measure(options) -> dict:
    from ray import serve

    body = page()
    paths = {"graph": "/v1/ocr", "floor": "/floor"}
    rounds = []
    with local_service(graph_args(options.batch_wait)) as url:
        serve.run(floor_app(), name="floor", route_prefix="/floor", blocking=False)
        for arm, path in paths.items():  # the same warm-up for both, and each must answer 200
            warm = latency(url, path, body, 20)
            if warm["ok"] != 20:
                raise RuntimeError(f"{arm} did not answer 200 during warm-up: {warm}")
        for round_ in range(options.rounds):
            order = list(paths) if round_ % 2 == 0 else list(reversed(paths))
            measured = {}
            for arm in order:
                measured[arm] = {"latency": latency(url, paths[arm], body, options.requests),
                                 "throughput": throughput(url, paths[arm], body, options.clients, options.seconds)}
            rounds.append(measured)
            print(f"round {round_ + 1}: " + ", ".join(
                f"{arm} p50 {statistics.median(m['latency']['seconds']) * 1000:.1f} ms "
                f"{m['throughput']['req_per_s']:.1f} req/s" for arm, m in measured.items()), flush=True)
    return {"benchmark": "overhead", "commit": commit(),
            "machine": machine(),
            "settings": {"rounds": options.rounds, "requests": options.requests, "clients": options.clients,
                         "seconds": options.seconds, "graph_args": graph_args(options.batch_wait), "body_bytes": len(body),
                         "RAY_SERVE_THROUGHPUT_OPTIMIZED": os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0")},
            "arms": {arm: arm_summary(rounds, arm) for arm in paths},
            "ratios": ratios(rounds), "rounds": rounds}


def measure_both(options) -> dict:
    """One fresh process (and Ray instance) per round and setting; the settings' order alternates."""
    rounds: dict = {"off": [], "on": []}
    reports: dict = {}
    for round_ in range(options.rounds):
        for setting in (["off", "on"] if round_ % 2 == 0 else ["on", "off"]):
            env = {name: value for name, value in os.environ.items() if name not in THROUGHPUT_OPTIMIZED_ENV}
            if setting == "on":
                env.update(THROUGHPUT_OPTIMIZED_ENV)
            with tempfile.NamedTemporaryFile(suffix=".json") as report:
                done = subprocess.run([sys.executable, __file__, "--rounds", "1", "--requests", str(options.requests),
                                       "--clients", str(options.clients), "--seconds", str(options.seconds),
                                       *(["--batch-wait", str(options.batch_wait)] if options.batch_wait is not None else []),
                                       "--report", report.name], env=env, timeout=900)
                if done.returncode not in (0, 1):  # 1: measured, but past the target
                    raise RuntimeError(f"the {setting} round failed ({done.returncode})")
                reports[setting] = json.loads(Path(report.name).read_text())
            rounds[setting] += reports[setting]["rounds"]
    settings = {**reports["off"]["settings"], "rounds": options.rounds, "RAY_SERVE_THROUGHPUT_OPTIMIZED": "both",
                "on_env": THROUGHPUT_OPTIMIZED_ENV}
    return {"benchmark": "overhead", "commit": commit(), "machine": reports["off"]["machine"], "settings": settings,
            "settings_compared": {setting: {"arms": {arm: arm_summary(rounds[setting], arm) for arm in ("graph", "floor")},
                                            "ratios": ratios(rounds[setting]), "rounds": rounds[setting]}
                                  for setting in rounds}}


def arm_summary(rounds: list, arm: str) -> dict:
    def quantile(seconds: list, q: float) -> float:
        return percentile(seconds, q) * 1000

    return {"p50_ms": summary([quantile(r[arm]["latency"]["seconds"], 0.5) for r in rounds]),
            "p95_ms": summary([quantile(r[arm]["latency"]["seconds"], 0.95) for r in rounds]),
            "req_per_s": summary([r[arm]["throughput"]["req_per_s"] for r in rounds]),
            "503": sum(r[arm]["latency"]["503"] + r[arm]["throughput"]["503"] for r in rounds),
            "failed": sum(r[arm]["latency"]["failed"] + r[arm]["throughput"]["failed"] for r in rounds)}


def ratios(rounds: list) -> dict:
    """graph / floor within each round, then over the rounds."""
    p50 = [statistics.median(r["graph"]["latency"]["seconds"]) / statistics.median(r["floor"]["latency"]["seconds"])
           for r in rounds]
    rate = [r["graph"]["throughput"]["req_per_s"] / r["floor"]["throughput"]["req_per_s"] for r in rounds]
    return {"p50": summary(p50), "req_per_s": summary(rate)}


def one_setting(report: dict, setting: str) -> dict:
    """A --throughput-optimized both report, narrowed to one setting's arms and ratios."""
    rest = {key: value for key, value in report.items() if key != "settings_compared"}
    return rest | report["settings_compared"][setting]


def render(report: dict) -> str:
    if "settings_compared" in report:
        return "\n\n".join(f"RAY_SERVE_THROUGHPUT_OPTIMIZED {setting}:\n\n" + render(one_setting(report, setting))
                           for setting in report["settings_compared"])
    settings = report["settings"]
    rows = [f"Null-engine graph against a 4-deployment no-op chain, {report['commit']}, {settings['rounds']} "
            f"interleaved rounds, {report['machine']['cpus']} CPUs, {settings['body_bytes']}-byte PNG; latency "
            f"from {settings['requests']} sequential requests, req/s from {settings['clients']} clients for "
            f"{settings['seconds']:g} s (median, min-max):", "",
            "| arm | p50 ms | p95 ms | req/s | 503 | failed |", "|---|---|---|---|---|---|"]
    for arm, row in report["arms"].items():
        cells = [f"{row[key]['median']:.1f} ({row[key]['min']:.1f}-{row[key]['max']:.1f})"
                 for key in ("p50_ms", "p95_ms", "req_per_s")]
        rows.append(f"| {arm} | " + " | ".join(cells) + f" | {row['503']} | {row['failed']} |")
    p50, rate = report["ratios"]["p50"], report["ratios"]["req_per_s"]
    rows += ["", f"graph / floor: p50 **{p50['median']:.2f}x** ({p50['min']:.2f}-{p50['max']:.2f}; target "
             f"<= {TARGET_P50_RATIO}x), req/s **{rate['median']:.2f}x** ({rate['min']:.2f}-{rate['max']:.2f})."]
    return "\n".join(rows)


def passed(report: dict) -> bool:
    if "settings_compared" in report:
        return all(passed(one_setting(report, setting)) for setting in report["settings_compared"])
    return report["ratios"]["p50"]["median"] <= TARGET_P50_RATIO and not report["arms"]["graph"]["failed"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch-wait", type=float, help="the graph's batching.batch_wait_timeout_s (default: its own)")
    parser.add_argument("--throughput-optimized", choices=("as-set", "both"), default="as-set",
                        help="both: every round with RAY_SERVE_THROUGHPUT_OPTIMIZED off and on, fresh Ray each")
    add_report_options(parser, "overhead.json")
    options = parser.parse_args()
    run = measure_both if options.throughput_optimized == "both" else measure
    return measure_or_render(options, lambda: run(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
