"""The soak suite: hostile input and faults against a running service, with figures.

    python load/soak.py [--report load/out/soak.json] [--quick]      (make soak)

It starts a local Ray instance and deploys a CPU copy of serve_config.yaml through the
controller's apply_config, the call `serve deploy` makes: the shipped limits, bundled
engine, two OCR replicas. Then, one after another (load/soak_scenarios.py):
  1. a seeded fuzzer of 400 hostile requests;
  2. memory and CPU bombs while two clients send normal pages;
  3. 70 stalled uploads plus one good request; then 170 job uploads that announce 400 MB and
     stall, and 170 long-polls on a running job, each followed by one good request;
  4. kill -9 of an OCR replica under 4-client load, 60 s watched after;
  5. rolling updates under load: a live user_config change, then new args (every replica restarts);
  6. RSS of every replica from request 500 to request 3,000, PDFs included;
  7. job lifecycles (submit, long-poll, result, delete, 404) beside /v1/ocr load.
The fuzzer sends a third of its requests to /v1/jobs (documents and the routes' own inputs),
and every job it gets accepted must end.
Prints one table, writes the JSON report (commit, settings, every figure, each verdict) and
exits 1 if any criterion of issue 9 fails. Under 20 minutes on 2 cores; --quick is a smoke run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.http.proxy_guard import PROXY_GUARD_ENV  # noqa: E402

os.environ.setdefault(*PROXY_GUARD_ENV)

import httpx  # noqa: E402
import yaml  # noqa: E402

from app.testkit.documents import numbered_pdf  # noqa: E402
from app.testkit.waits import wait_for  # noqa: E402
from load import soak_scenarios as soak  # noqa: E402
from load.common import commit, free_port  # noqa: E402
from load.hostile import apng_frame_bomb, damaged_tiffs, fan_out_forms_pdf, self_drawing_form_pdf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OCR_REPLICAS = 2
# The shipped limits, but bodies due in 10 s instead of 30 so that the fuzzer's bodies that
# never complete, and the 70 stalled uploads, cost seconds each rather than half a minute.
READ_TIMEOUT_S = 10


def soak_config(port: int) -> dict:
    """serve_config.yaml for this machine: bundled engine, no GPU, fixed replica counts."""
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    config["proxy_location"] = "HeadOnly"
    app = config["applications"][0]
    args = app["args"]
    # No API keys here: the soak's service listens on 127.0.0.1 only, for this process. Jobs in a
    # SQLite file of this run (the fleet's Redis is tests/test_tls.py's), short leases.
    for key in ("model_dir", "vlm", "ocr_autoscaling", "auth"):
        args.pop(key, None)
    args["jobs"] = {"store": f"sqlite:///{tempfile.mkdtemp(prefix='ocr-soak-jobs-')}/jobs.sqlite3", "lease_s": 5,
                    "max_pages": 40, "upload_idle_timeout_s": READ_TIMEOUT_S}
    config.pop("http_options", None)
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    args.update(engine="ppocr", device="cpu", engine_threads=1, ocr_replicas=OCR_REPLICAS, ocr_num_cpus=0.5,
                ocr_num_gpus=0)
    # The StructureModel as shipped (layout and tables on every page), one replica of it on this machine.
    args["structure"].update(replicas=1, num_cpus=0.25, threads=1)
    args["limits"]["upload_read_timeout_s"] = READ_TIMEOUT_S
    args["batching"]["max_concurrent_batches"] = 1
    for deployment in app["deployments"]:
        deployment.pop("autoscaling_config", None)
        deployment["ray_actor_options"] = {"num_cpus": 0.25}
        if deployment["name"] == "OCRModel":
            deployment["user_config"]["max_concurrent_batches"] = 1
            deployment.pop("ray_actor_options")
        else:
            deployment["num_replicas"] = 1
    return config


def running_job(url: str) -> str:
    """A 40-page job to long-poll on: it runs for a while on the CPU engine."""
    return httpx.post(f"{url}/v1/jobs", files={"file": ("doc.pdf", numbered_pdf(40, "Polled"), "application/pdf")},
                      timeout=120).json()["id"]


def apply_config(config: dict) -> None:
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    _get_global_client().deploy_apps(ServeDeploySchema.model_validate(config))


def updates(url: str, config: dict) -> list:
    live = copy.deepcopy(config)
    next(d for d in live["applications"][0]["deployments"] if d["name"] == "OCRModel")["user_config"][
        "batch_wait_timeout_s"] = 0.02
    restart = copy.deepcopy(live)
    restart["applications"][0]["args"]["readiness_timeout_s"] = 2.5

    def info() -> dict:
        return httpx.get(f"{url}/v1/info", timeout=10).json()

    def running() -> bool:
        return soak.running_replicas() and all(soak.running_replicas().values())

    def apply_live() -> None:
        apply_config(live)
        wait_for(lambda: info()["engine"]["batching"]["batch_wait_timeout_s"] == 0.02 and running(), 120, "live knob",
                 not_up_yet=(Exception,), poll_s=0.5)  # mid-update, Serve's and Ray's APIs fail in many ways

    def apply_restart() -> None:
        old = set(soak.serve_actors())
        apply_config(restart)
        wait_for(lambda: info()["settings"]["readiness_timeout_s"] == 2.5 and running()
                 and not old & set(soak.serve_actors()), 300, "restart", not_up_yet=(Exception,), poll_s=0.5)

    return [("user_config: batch_wait_timeout_s 0.05 -> 0.02", apply_live),
            ("args: readiness_timeout_s 2.0 -> 2.5 (restarts every replica)", apply_restart)]


def verdicts(results: dict, limits: dict) -> dict:
    out = {}
    fuzz = results.get("fuzz")
    if fuzz:
        out["fuzzer: 0 x 5xx, 0 drops, JSON errors, all replicas up"] = (
            not fuzz["bad"] and not fuzz["replica_dips"] and fuzz["alive_after"] and fuzz["requests"] >= 300)
        out["fuzzer on /v1/jobs: every accepted job ended"] = (
            fuzz.get("job_route_requests", 0) > 0 and fuzz.get("jobs_unfinished") == [])
        doors = fuzz.get("results_and_streams_by_status", {})
        out["fuzzer on chat, every result format and event streams: 0 x 5xx"] = (
            fuzz.get("chat_requests", 0) > 0 and any(key.startswith("events") for key in doors)
            and not any(key.split()[-1].startswith("5") for key in doors)
            and not any(status.startswith("5") for status in fuzz.get("chat_by_status", {})))
    bombs = results.get("bombs")
    if bombs:
        slack = limits["page_render_timeout_s"] + 10
        out["bombs: 4xx within limit + 10 s"] = all(400 <= b["status"] < 500 and b["seconds"] < slack
                                                    for b in bombs["bombs"].values())
        out["bombs: other clients 0 failed, no actor died"] = (
            bombs["clients"]["failed"] == 0 and not bombs["actors_replaced"] and bombs["dead_actors_added"] == 0)
    stalled = results.get("stalled")
    if stalled:
        out["70 stalled uploads: the good request gets 200"] = stalled["good_status"] == 200 and stalled["good_correct"]
    for name in ("stalled_jobs", "long_polls"):
        held = results.get(name)
        if held:
            out[f"{name.replace('_', ' ')} x170: the good request gets 200 within 30 s"] = (
                held["good_status"] == 200 and held["good_correct"] and held["good_seconds"] < 30)
    jobs = results.get("jobs")
    if jobs:
        out["job lifecycles: 0 failed, /v1/ocr beside them 0 failed"] = (
            not jobs["failures"] and jobs["cycles"].get("ok", 0) > 0 and jobs["ocr_load"]["failed"] == 0)
    kill = results.get("kill")
    if kill:
        out["kill -9: 0 failed, count back within 15 s"] = (
            kill["after_kill"]["failed"] == 0 and kill["seconds_until_back"] is not None
            and kill["seconds_until_back"] <= 15)
    rolling = results.get("rolling")
    if rolling:
        out["rolling update: 0 failed"] = rolling["load"]["failed"] == 0
    rss = results.get("rss")
    if rss:
        growth = [r["growth_pct"] for r in rss["per_replica"].values()]
        out[f"RSS growth < {soak.RSS_GROWTH_LIMIT_PCT}% for every replica"] = bool(growth) and all(
            g is not None and g < soak.RSS_GROWTH_LIMIT_PCT for g in growth)
    return out


def table(results: dict, checks: dict) -> str:
    rows = []
    if "fuzz" in results:
        f = results["fuzz"]
        rows.append(("fuzzer", f"{f['requests']} requests (seed {f['seed']}) in {f['seconds']} s: {f['by_status']}; "
                     f"bad {len(f['bad'])}; replica dips {len(f['replica_dips'])}"))
        if f.get("chat_requests"):
            rows.append(("fuzzer: /v1/chat/completions", f"{f['chat_requests']} requests: {f['chat_by_status']}"))
            rows.append(("fuzzer: job results and events", str(f["results_and_streams_by_status"])))
    if "bombs" in results:
        b = results["bombs"]
        for name, r in b["bombs"].items():
            rows.append((f"bomb {name}", f"{r['status']} {r['code']} in {r['seconds']} s"))
        c = b["clients"]
        rows.append(("clients during bombs", f"{c['requests']} requests, {c['failed']} failed, longest gap "
                     f"{c['longest_gap_s']} s; actors replaced {len(b['actors_replaced'])}, dead added "
                     f"{b['dead_actors_added']}"))
        rows.append(("peak RSS per replica (MiB)", ", ".join(f"{k} {v['peak_rss_mb']:.0f}"
                                                              for k, v in b["peak_rss_per_replica"].items())))
    if "stalled" in results:
        s = results["stalled"]
        rows.append(("70 stalled uploads", f"good request {s['good_status']} in {s['good_seconds']} s; stalled "
                     f"answered {s['stalled_answers']}"))
    for name in ("stalled_jobs", "long_polls"):
        if name in results:
            h = results[name]
            rows.append((f"170 {name.replace('_', ' ')}", f"good request {h['good_status']} in {h['good_seconds']} s; "
                         f"held answered {h.get('stalled_answers') or h.get('poll_answers')}"))
    if "jobs" in results:
        j = results["jobs"]
        rows.append(("job lifecycles", f"{j['cycles']} in {j['seconds']} s by {j['job_clients']} clients; /v1/ocr "
                     f"beside: {j['ocr_load']['requests']} requests, {j['ocr_load']['failed']} failed"))
    if "kill" in results:
        k = results["kill"]
        a = k["after_kill"]
        rows.append(("kill -9 OCR replica", f"{a['requests']} requests in the {k['watched_s']} s after, {a['failed']} "
                     f"failed {a['failed_codes']}; count back in {k['seconds_until_back']} s"))
    if "rolling" in results:
        r = results["rolling"]
        steps = "; ".join(f"{u['update']}: {u['seconds']} s, restarted {u['restarted'] or 'none'}" for u in r["updates"])
        rows.append(("rolling update", f"{r['load']['requests']} requests, {r['load']['failed']} failed, "
                     f"longest gap {r['load']['longest_gap_s']} s; {steps}"))
    if "rss" in results:
        r = results["rss"]
        rows.append((f"RSS, request {r['baseline_at']} -> {r['requests']}",
                     ", ".join(f"{k} {v['growth_pct']:+.2f}%" for k, v in r["per_replica"].items()
                               if v["growth_pct"] is not None) + f"; {r['load']['failed']} failed"))
    width = max((len(name) for name, _ in rows), default=0)
    lines = [f"{name:<{width}}  {text}" for name, text in rows]
    lines.append("")
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in checks.items()]
    return "\n".join(lines)


def markdown(report: dict) -> str:
    """The README's soak table, rendered from a report (never typed in by hand)."""
    results, checks = report["results"], report["verdicts"]
    lines = [f"Soak run of commit `{report['commit']}` on {report['date']} ({report['seconds']} s, "
             f"`python load/soak.py`{' --quick' if report['quick'] else ''}):", "",
             "| scenario | figures |", "|---|---|"]
    for row in table(results, {}).splitlines():
        if row.strip():
            name, _, text = row.partition("  ")
            lines.append(f"| {name.strip()} | {text.strip().replace('|', '/')} |")
    lines += ["", "| criterion (issue 9) | verdict |", "|---|---|"]
    lines += [f"| {name} | {'PASS' if ok else 'FAIL'} |" for name, ok in checks.items()]
    return "\n".join(lines)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, default=ROOT / "load" / "out" / "soak.json")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run of every scenario")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--markdown", type=Path, metavar="REPORT",
                        help="print the README table of an existing report and exit (runs nothing)")
    options = parser.parse_args()
    if options.markdown:
        print(markdown(json.loads(options.markdown.read_text())))
        return 0
    sizes = ({"fuzz": 60, "after_s": 15, "rss": 300, "baseline": 100, "jobs_s": 20} if options.quick else
             {"fuzz": 400, "after_s": 60, "rss": 3000, "baseline": 500, "jobs_s": 120})

    import ray
    from ray import serve

    from app.serve.deploy import wait_until_running

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = soak_config(port)
    limits = next(d for d in config["applications"][0]["deployments"] if d["name"] == "Preprocessor")[
        "user_config"]["limits"]
    started = time.monotonic()
    ray.init(address="local", num_cpus=6, include_dashboard=False, log_to_driver=False)
    results: dict = {}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        apply_config(config)
        wait_until_running("ocr", 300)
        print(f"service up in {time.monotonic() - started:.0f} s at {url}", flush=True)
        scenarios = [
            ("fuzz", lambda: soak.fuzz(url, seed=options.seed, count=sizes["fuzz"], jobs=True, doors=True)),
            ("bombs", lambda: soak.bombs(url, {"self-drawing-form-pdf": self_drawing_form_pdf(),
                                                "fan-out-forms-pdf-7x10": fan_out_forms_pdf(7, 10),
                                                "apng-2^31-frames": apng_frame_bomb(), **damaged_tiffs()})),
            ("stalled", lambda: soak.stalled_uploads(url, 70, READ_TIMEOUT_S)),
            ("stalled_jobs", lambda: soak.stalled_uploads(url, 170, READ_TIMEOUT_S, path="/v1/jobs",
                                                          announced=400_000_000)),
            ("long_polls", lambda: soak.long_polls(url, 170, running_job(url), soak.good_png())),
            ("jobs", lambda: soak.jobs_lifecycle(url, numbered_pdf(3, "Cycle"), "Cycle page 3",
                                                 seconds=sizes["jobs_s"])),
            ("kill", lambda: soak.kill_ocr_replica(url, clients=4, after_s=sizes["after_s"]) | {"watched_s": sizes["after_s"]}),
            ("rolling", lambda: soak.rolling_update(url, updates(url, config))),
            ("rss", lambda: soak.rss_growth(url, requests=sizes["rss"], baseline_at=sizes["baseline"])),
        ]
        for name, run in scenarios:
            began = time.monotonic()
            results[name] = run()
            print(f"{name}: done in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    checks = verdicts(results, limits)
    report = {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": options.quick,
              "seconds": round(time.monotonic() - started), "config": config, "sizes": sizes,
              "results": results, "verdicts": checks}
    options.report.parent.mkdir(parents=True, exist_ok=True)
    options.report.write_text(json.dumps(report, indent=2, default=str))
    print(table(results, checks))
    print(f"report: {options.report} ({report['seconds']} s)")
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
