"""Jobs on the Redis store survive the fleet's failures: a 3-node local Ray cluster, the fleet's
serve_config.yaml deployed with the CLI, and two faults in the middle of a job.

    .venv/bin/python load/jobs_failover.py [--pages 40]

- a real redis-server (AOF on, a password read from a file, as serve_config.yaml has it);
- a head node with no CPUs for replicas (Serve's controller and the one HTTP proxy live there)
  and two worker nodes, through ray.cluster_utils.Cluster, so a node can be taken away;
- serve_config.yaml with CPU sizes and the bundled engine, deployed by `serve deploy`;
- fault 1: `serve shutdown` while a job runs, then `serve deploy` again: the job resumes;
- fault 2: the node that holds the job runner is removed while a job runs (its processes killed):
  Serve places the runner on the other node, which takes over the lapsed lease.
After each, the job must end `succeeded` with every page once, each page's text equal to a
synchronous request for it (load/jobs_check.py). Writes load/results/jobs_failover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ["RAY_AUTH_MODE"] = "disabled"  # a throwaway cluster on 127.0.0.1; the CLI talks to it without a token
from load.common import ROOT, add_report_options, commit, free_port, measure_or_render  # noqa: E402  (sets the offline and proxy-guard variables first)

import httpx  # noqa: E402
import yaml  # noqa: E402

from app.testkit.documents import numbered_pdf  # noqa: E402
from load.jobs_check import compare, follow, submit  # noqa: E402
from app.testkit.redis_server import redis_server  # noqa: E402
from app.testkit.waits import wait_for  # noqa: E402

BIN = Path(sys.executable).parent
LEASE_S = 3


def fleet_config(path: Path, http_port: int, store: str, password_file: Path) -> Path:
    """serve_config.yaml, sized for CPUs on one machine; the jobs section as the fleet has it but local."""
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    config["proxy_location"] = "HeadOnly"  # three nodes share one host: one proxy, one port
    config["http_options"].update(host="127.0.0.1", port=http_port)
    app = config["applications"][0]
    args = app["args"]
    args.pop("auth")  # 127.0.0.1 only; tests/test_auth.py covers the keys
    args.pop("model_dir")
    args.update(engine="ppocr", engine_threads=1, ocr_num_gpus=0, ocr_num_cpus=0.5, gpu_wait_timeout_s=5)
    args["ocr_autoscaling"].update(min_replicas=2, max_replicas=2)
    args["jobs"].update(store=store, redis_password_file=str(password_file), runner_replicas=1, lease_s=LEASE_S,
                        max_inflight_pages=4)
    for deployment in app["deployments"]:
        deployment["ray_actor_options"] = {"num_cpus": 0.25}
        if "autoscaling_config" in deployment:
            deployment["autoscaling_config"].update(min_replicas=1, max_replicas=1)
    path.write_text(yaml.safe_dump(config))
    return path


def serve_cli(*args: str, timeout: float = 300) -> None:
    done = subprocess.run([str(BIN / "serve"), *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"serve {' '.join(args)}: {done.stderr[-2000:]}")


def wait_ready(url: str, timeout_s: float = 300) -> float:
    """Seconds until /readyz answers 200 (app/testkit's wait, shared with the tests)."""
    started = time.monotonic()
    wait_for(lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200, timeout_s, f"{url} /readyz")
    return time.monotonic() - started


def wait_done(http: httpx.Client, job_id: str, at_least: int, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = http.get(f"/v1/jobs/{job_id}").json()
        if status["pages"]["done"] >= at_least:
            return status
        time.sleep(0.3)
    raise TimeoutError(f"job {job_id}: fewer than {at_least} pages done in {timeout_s} s")


def runner_node_id() -> str:
    from ray.util.state import list_actors

    runners = [actor for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
               if "JobRunner" in (actor.class_name or "")]
    if len(runners) != 1:
        raise RuntimeError(f"expected one live JobRunner, found {len(runners)}")
    return runners[0].node_id


def checked_job(http: httpx.Client, document: bytes, pages: int, fault, name: str) -> dict:
    """Submit, let a few pages finish, run the fault, follow the job to its end, compare every page."""
    started = time.monotonic()
    job = submit(http, document)
    before = wait_done(http, job["id"], at_least=5)
    fault_report = fault()
    final = follow(http, job["id"], timeout_s=600)
    result = http.get(job["result_url"]).json()
    checked = compare(http, document, result, pages)
    report = {"fault": name, "job_id": job["id"], "done_when_fault_began": before["pages"]["done"],
              **fault_report, "final_status": final["status"], "final_pages": final["pages"],
              "job_seconds": round(time.monotonic() - started, 1), **checked}
    print(json.dumps(report), flush=True)
    return report


def run(options) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="ocr-failover-"))
    password = secrets.token_urlsafe(24)
    password_file = work / "redis_password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    http_port, dashboard_port = free_port(), free_port()
    url, dashboard = f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{dashboard_port}"
    document = numbered_pdf(options.pages)
    reports = []
    with redis_server(password=password) as store:
        config = fleet_config(work / "serve.yaml", http_port, store, password_file)
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": True, "dashboard_host": "127.0.0.1",
            "dashboard_port": dashboard_port})
        workers = [cluster.add_node(num_cpus=3) for _ in range(2)]
        cluster.wait_for_nodes()
        cluster.connect()
        try:
            serve_cli("deploy", str(config), "-a", dashboard)
            first_ready_s = wait_ready(url)
            print(f"3-node cluster, service ready in {first_ready_s:.0f} s", flush=True)
            with httpx.Client(base_url=url, timeout=300) as http:
                def restart_application() -> dict:
                    began = time.monotonic()
                    serve_cli("shutdown", "-y", "-a", dashboard)
                    serve_cli("deploy", str(config), "-a", dashboard)
                    return {"ready_again_s": round(time.monotonic() - began + wait_ready(url), 1)}

                reports.append(checked_job(http, document, options.pages, restart_application,
                                           "serve shutdown + serve deploy"))

                def remove_runner_node() -> dict:
                    node_id = runner_node_id()
                    [node] = [n for n in workers if n.node_id == node_id]
                    cluster.remove_node(node, allow_graceful=False)
                    workers.remove(node)
                    return {"removed_node": node_id[:12]}

                reports.append(checked_job(http, document, options.pages, remove_runner_node,
                                           "the job runner's node removed"))
                reports[-1]["runner_now_on"] = runner_node_id()[:12]
        finally:
            try:
                serve_cli("shutdown", "-y", "-a", dashboard, timeout=120)
            except Exception as exc:  # the report matters more than a clean shutdown
                print(f"serve shutdown: {exc}", file=sys.stderr)
            ray.shutdown()
            cluster.shutdown()
    return {"commit": commit(), "pages": options.pages,
            "settings": {"nodes": "head (0 CPUs: controller, proxy) + 2 workers x 3 CPUs", "store": "redis, AOF",
                         "lease_s": LEASE_S, "runner_replicas": 1, "max_inflight_pages": 4},
            "faults": reports, "ok": all(r["final_status"] == "succeeded" and r["ok"] for r in reports)}


HEADER = "| what | figure | command |\n|---|---|---|\n"  # a rendered block is a whole table


def render(report: dict) -> str:
    """The README's rows for a report: one per fault."""
    rows = []
    for fault in report["faults"]:
        extra = (f", ready again {fault['ready_again_s']} s later" if "ready_again_s" in fault else
                 f", node {fault.get('removed_node')} removed, runner now on {fault.get('runner_now_on')}")
        rows.append(f"| Redis store, 3 nodes: {fault['fault']} at {fault['done_when_fault_began']}/{report['pages']} "
                    f"pages{extra} | {fault['final_status']}, {fault['pages_in_result']} pages, "
                    f"{len(fault['missing'])} missing, {len(fault['duplicated'])} twice, "
                    f"{len(fault['mismatched_with_sync'])} differing from /v1/ocr, in {fault['job_seconds']} s "
                    f"(commit {report['commit']}) | `load/jobs_failover.py` |")
    return HEADER + "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=40)
    add_report_options(parser, "jobs_failover.json")
    options = parser.parse_args()
    return measure_or_render(options, lambda: run(options), render, lambda report: report["ok"])


if __name__ == "__main__":
    sys.exit(main())
