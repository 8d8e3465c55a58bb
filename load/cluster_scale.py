"""Autoscaling, node loss and overload on a real 3-node Ray cluster built on this machine.

    python load/cluster_scale.py [--report load/out/cluster.json] [--plot load/out/cluster.png]
    python load/cluster_scale.py --render load/results/cluster_scale.json

Three Ray nodes (a head and two workers, each with 4 CPUs and one logical GPU) run the
application with the fleet's shape scaled down: OCR replicas at num_gpus 0.25 under the
service-rate policy (2 to 3 replicas, at most one per node, batch capacity 2 pages), the
CPU stages fixed.
Then, with the bounded step-load runner (load/stepload.py):
  1. where the OCR replicas run (node ids);
  2. a load step (open loop): 1 request/s, then 8, then none; replicas over time, time to scale up and
     back down to min_replicas, failures across the scale events, p95 before and during;
  3. a worker node removed under light load: time until requests succeed again, errors meanwhile;
  4. a flood at a fixed 30 requests/s: only 200 or 503, and every 200 a full, correct result.
Prints a summary and writes a JSON report and a PNG plot. Stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Replicas and handles report queue lengths every second instead of every 10 s, so the
# demonstration scales within seconds. Set before Ray starts: every node inherits it.
os.environ.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
os.environ.setdefault("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import commit, free_port, machine  # noqa: E402
from load.stepload import StepLoad, plot, replica_counts, to_json, window  # noqa: E402

# Two replicas at least, one per node at most: the replicas always span two nodes, so losing
# a worker always loses a replica, and the step can add the third node's.
MIN_REPLICAS, MAX_REPLICAS = 2, 3
ARGS = {
    "engine": "ppocr", "engine_threads": 1, "ocr_num_cpus": 0.5, "ocr_num_gpus": 0.25,
    "ocr_max_replicas_per_node": 1,
    "ocr_autoscaling": {"min_replicas": MIN_REPLICAS, "max_replicas": MAX_REPLICAS, "upscale_delay_s": 2,
                        "downscale_delay_s": 8, "look_back_period_s": 11, "policy": "service_rate",
                        "target_queue_wait_s": 2},
    "batching": {"max_batch_size": 2, "batch_wait_timeout_s": 0.02, "max_concurrent_batches": 1},
    "max_inflight_requests": 12, "max_queued_pages": 8,
}
EXPECTED = "scale test 4711"
# (requests per second, seconds) of each phase: the benchmark's, and `--short`'s for make test
# (tests/test_cluster_scale.py), with room over what the full run measured (scale-up 22.7 s,
# back to the minimum 19.4 s, answering again 5.0 s after a node loss).
PHASES = {
    "full": {"step": [(1.0, 15.0), (8.0, 45.0), (0.0, 75.0)], "node_loss": [(1.0, 5.0), (1.0, 40.0)],
             "flood": [(30.0, 20.0)]},
    "short": {"step": [(1.0, 10.0), (8.0, 35.0), (0.0, 45.0)], "node_loss": [(1.0, 5.0), (1.0, 25.0)],
              "flood": [(30.0, 12.0)]},
}


def start_three_nodes():
    """A head and two workers on this machine, each with 4 CPUs and one logical GPU; ray.init'ed."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 1, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=4, num_gpus=1) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    return cluster, workers


def start_serve() -> str:
    """Serve with its proxy on the head only, on a free port; returns the base URL."""
    from ray import serve

    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    return f"http://127.0.0.1:{port}"


def ocr_placements(serve, want: int, tries: int = 80) -> dict:
    handle = serve.get_deployment_handle("OCRModel", app_name="ocr")
    placements = {}
    for _ in range(tries):
        placement = handle.info.remote().result(timeout_s=30)["placement"]
        placements[placement["replica"]] = placement["node_id"]
        if len(placements) >= want:
            break
    return placements


def first_time(run, start: float, predicate) -> float | None:
    for t, counts in run.replicas:
        if t >= start and predicate(counts.get("OCRModel", 0)):
            return t
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, default=Path("load/out/cluster.json"))
    parser.add_argument("--plot", type=Path, default=Path("load/out/cluster.png"))
    parser.add_argument("--render", metavar="JSON", help="print the README table of a report and exit")
    parser.add_argument("--short", action="store_true", help="shorter phases (make test): the same checks")
    options = parser.parse_args()
    phases = PHASES["short" if options.short else "full"]
    if options.render:
        print(render(json.loads(Path(options.render).read_text())))
        return 0

    import ray
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy
    from app.synthetic import png_bytes, render_text_page

    started = time.monotonic()
    cluster, workers = start_three_nodes()
    report: dict = {}
    try:
        url = start_serve()
        deploy(build_app(ARGS), name="ocr", timeout_s=300)
        print(f"3-node cluster and service up in {time.monotonic() - started:.0f}s", flush=True)
        # Four lines: a few hundred ms a page, so 8 requests/s outrun two replicas on this machine.
        payload = png_bytes(render_text_page(["Scale test 4711"] + [f"Line {i} of the test page" for i in range(3)],
                                             width=800))
        load = StepLoad(url, payload, lambda body: EXPECTED in body["text"].lower(), sample_replicas=True)

        # 1. Where the OCR replicas run.
        placements = ocr_placements(serve, want=MIN_REPLICAS)
        report["placement"] = {"ocr_replicas_by_node": _count(placements.values()),
                               "nodes_with_ocr_replicas": len(set(placements.values()))}

        # 2. The load step.
        steps = phases["step"]
        step = load.run(steps)
        step_at, quiet_at = steps[0][1], steps[0][1] + steps[1][1]
        peak = max((c.get("OCRModel", 0) for _, c in step.replicas), default=0)
        scaled_up = first_time(step, step_at, lambda n: n >= peak and n > MIN_REPLICAS)
        back_down = first_time(step, quiet_at, lambda n: n <= MIN_REPLICAS)
        report["step"] = {
            "peak_ocr_replicas": peak,
            "seconds_to_scale_up": None if scaled_up is None else round(scaled_up - step_at, 1),
            "seconds_back_to_min_after_load": None if back_down is None else round(back_down - quiet_at, 1),
            "before": window(step, 0, step_at),
            "during": window(step, step_at, quiet_at),
            "all": window(step, 0, float("inf")),
        }

        # 3. Node loss under light load: remove a worker that holds an OCR replica.
        placements = ocr_placements(serve, want=MIN_REPLICAS)
        victim = next((w for w in workers if w.node_id in set(placements.values())), workers[0])

        def remove_victim(index: int, run) -> None:
            if index == 1:
                run.events.append((run.offered[-1][0], "worker node removed"))
                cluster.remove_node(victim)

        loss = load.run(phases["node_loss"], on_step=remove_victim)
        removed_at = loss.events[0][0]
        after = [s for s in loss.samples if s.started + s.latency >= removed_at]
        failures = [s for s in after if s.status != 200]
        last_failure = max((f.started for f in failures), default=removed_at)
        recovered = next((s.started + s.latency for s in after if s.status == 200 and s.started >= last_failure), None)
        report["node_loss"] = {
            "removed_node_had_ocr_replica": victim.node_id in set(placements.values()),
            "errors_after_removal": len(failures),
            "error_statuses": sorted({f.status for f in failures}),
            "seconds_until_answering_again": None if recovered is None else round(recovered - removed_at, 1),
            "ok_after_removal": sum(s.status == 200 for s in after),
            "correct_after_removal": sum(s.correct for s in after),
            "ocr_replicas_at_end": replica_counts().get("OCRModel", 0),
        }

        # 4. A flood at a fixed 30 requests/s, far past what 3 replicas clear.
        flood = load.run(phases["flood"])
        summary = window(flood, 0, float("inf"))
        report["flood"] = {**summary, "every_200_correct": summary["ok"] == summary["correct"]}

        all_runs = {"step": to_json(step), "node_loss": to_json(loss), "flood": to_json(flood)}
        options.report.parent.mkdir(parents=True, exist_ok=True)
        options.report.write_text(json.dumps({"benchmark": "cluster_scale", "commit": commit(), "machine": machine(),
                                              "settings": {"args": ARGS, "steps_requests_per_s": steps,
                                                           "node_loss": phases["node_loss"],
                                                           "flood": phases["flood"], "short": options.short},
                                              "summary": report, "runs": all_runs}))
        plot(step, options.plot, title="OCR replicas under a load step (3 nodes)")
        print(json.dumps(report, indent=1))
        print(f"report: {options.report}  plot: {options.plot}  total {time.monotonic() - started:.0f}s")
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    return 0


def render(report: dict) -> str:
    summary, settings = report["summary"], report["settings"]
    step, loss, flood = summary["step"], summary["node_loss"], summary["flood"]
    rates = " -> ".join(f"{rate:g}" for rate, _ in settings["steps_requests_per_s"])
    scaling = settings["args"]["ocr_autoscaling"]

    def counts(window: dict) -> str:
        return (f"{window['requests']} requests: {window['ok']} x 200 ({window['correct']} correct), "
                f"{window['status_503']} x 503, {window['failed']} failed, {window['late']} late")

    return "\n".join([
        f"3-node cluster on this machine, `{report['commit']}`, {report['machine']['cpus']} CPUs; OCR replicas "
        f"{scaling['min_replicas']}-{scaling['max_replicas']}, policy `{scaling['policy']}`, open-loop load:",
        "",
        "| what | figure |",
        "|---|---|",
        f"| load step, {rates} requests/s | {summary['placement']['nodes_with_ocr_replicas']} nodes with OCR "
        f"replicas at the start; peak {step['peak_ocr_replicas']} replicas, {step['seconds_to_scale_up']} s to "
        f"scale up, back to the minimum {step['seconds_back_to_min_after_load']} s after the load |",
        f"| same, p95 of the 200s before / during the step | {_seconds(step['before']['p95_s'])} / "
        f"{_seconds(step['during']['p95_s'])} |",
        f"| same, every request | {counts(step['all'])} |",
        f"| a worker holding an OCR replica removed at 1 request/s | {loss['errors_after_removal']} errors "
        f"{loss['error_statuses']}; answering again {loss['seconds_until_answering_again']} s later; "
        f"{loss['ok_after_removal']} x 200 after, {loss['correct_after_removal']} correct |",
        f"| flood at a fixed 30 requests/s | {counts(flood)} |",
    ])


def _seconds(value) -> str:
    return "none" if value is None else f"{value:.2f} s"


def _count(values) -> dict:
    counts: dict = {}
    for value in values:
        counts[value[:8]] = counts.get(value[:8], 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
