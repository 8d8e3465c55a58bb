"""`serve deploy serve_config.yaml` onto a real `ray start --head` cluster, through the CLI.

On a cluster with no GPU the fleet file must fail at once with a message that
names the GPUs (not sit in DEPLOYING); a CPU copy of it must come up and answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from app.synthetic import render_text_page
from app.testkit.documents import numbered_pdf
from app.testkit.processes import kill_group, kill_leftovers
from app.testkit.waits import wait_for
from app.tools.tiny_vlm import build_got_ocr2
from app.ops.weights import write_manifest
from tests.conftest import free_port, png_bytes

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.own_cluster


def cli_env() -> dict:
    env = dict(os.environ)
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.fixture(scope="module")
def head_node():
    """A real head node (4 CPUs, no GPU) in its own process group, torn down with all its children."""
    temp_dir = tempfile.mkdtemp(prefix="ocr-ray-")
    ports = {name: free_port() for name in ("gcs", "dashboard", "client", "agent", "http", "worker_agent")}
    command = [
        str(BIN / "ray"), "start", "--head", "--block", "--num-cpus=4", "--num-gpus=0",
        f"--port={ports['gcs']}", f"--dashboard-port={ports['dashboard']}", "--dashboard-host=127.0.0.1",
        f"--ray-client-server-port={ports['client']}", f"--dashboard-agent-listen-port={ports['agent']}",
        f"--temp-dir={temp_dir}", "--include-dashboard=true", "--disable-usage-stats",
    ]
    process = subprocess.Popen(command, env=cli_env(), start_new_session=True, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    try:
        wait_for(lambda: httpx.get(f"{dashboard}/api/version", timeout=2).status_code == 200, 90, "dashboard")
        yield {"dashboard": dashboard, "http_port": ports["http"], "gcs": f"127.0.0.1:{ports['gcs']}",
               "temp_dir": temp_dir, "worker_agent_port": ports["worker_agent"]}
    finally:
        subprocess.run([str(BIN / "serve"), "shutdown", "-y", "-a", dashboard], env=cli_env(),
                       capture_output=True, timeout=60)
        kill_group(process)
        kill_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def write_config(tmp_path: Path, http_port: int, cpu_only: bool) -> Path:
    """The fleet file with a local port; cpu_only: no GPUs, one replica each, a tiny model built here."""
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    config["http_options"].update(host="127.0.0.1", port=http_port)
    for name in ("ssl_certfile", "ssl_keyfile"):  # the fleet's files are not on this machine; tests/test_tls.py
        config["http_options"].pop(name)
    if cpu_only:
        model_dir = build_got_ocr2(tmp_path / "tiny-got")
        write_manifest(model_dir)
        app = config["applications"][0]
        app["args"].update(ocr_num_gpus=0, ocr_num_cpus=1, model_dir=str(model_dir))
        app["args"].pop("auth")  # listens on 127.0.0.1 only; test_auth.py covers the keys
        app["args"].pop("jobs")  # no Redis here; tests/test_jobs_*.py cover the job stores
        app["args"]["ocr_autoscaling"].update(min_replicas=1, max_replicas=2)
        app["args"]["vlm"]["max_new_tokens"] = 8
        for deployment in app["deployments"]:
            deployment["ray_actor_options"] = {"num_cpus": 0.25}
            if "autoscaling_config" in deployment:
                deployment["autoscaling_config"].update(min_replicas=1, max_replicas=2)
    else:
        config["applications"][0]["args"]["gpu_wait_timeout_s"] = 5  # the fleet's 600 s, shortened
    path = tmp_path / ("serve_cpu.yaml" if cpu_only else "serve_fleet.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


def serve_deploy(path: Path, dashboard: str) -> None:
    result = subprocess.run([str(BIN / "serve"), "deploy", str(path), "-a", dashboard], env=cli_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def app_status(dashboard: str) -> dict:
    return httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()["applications"].get("ocr", {})


def test_fleet_config_fails_fast_without_gpus(head_node, tmp_path):
    started = time.monotonic()
    serve_deploy(write_config(tmp_path, head_node["http_port"], cpu_only=False), head_node["dashboard"])
    status = wait_for(
        lambda: (s := app_status(head_node["dashboard"])).get("status") == "DEPLOY_FAILED" and s,
        60, "DEPLOY_FAILED",
    )
    elapsed = time.monotonic() - started
    print(f"fleet config on a GPU-less cluster: DEPLOY_FAILED {elapsed:.1f}s after serve deploy")
    assert elapsed < 50, f"took {elapsed:.1f}s to fail"  # the 5 s GPU wait, then the message
    assert "GPU" in status["message"] and "has 0" in status["message"], status["message"]
    assert "7.5 GPU(s) missing" in status["message"], status["message"]


def test_cpu_copy_of_fleet_config_deploys_and_answers(head_node, tmp_path):
    serve_deploy(write_config(tmp_path, head_node["http_port"], cpu_only=True), head_node["dashboard"])
    wait_for(lambda: app_status(head_node["dashboard"]).get("status") == "RUNNING", 240, "RUNNING")
    status = subprocess.run([str(BIN / "serve"), "status", "-a", head_node["dashboard"]], env=cli_env(),
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and "RUNNING" in status.stdout, status.stderr
    image = png_bytes(render_text_page(["Cluster deploy works 42"]))
    response = httpx.post(f"http://127.0.0.1:{head_node['http_port']}/v1/ocr",
                          files={"file": ("c.png", image, "image/png")}, timeout=120)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["engine"]["name"] == "vlm" and body["engine"]["version"] == "got_ocr2:tiny-got"
    page = body["pages"][0]
    assert page["text"] and page["valid"] == (page["finish_reason"] == "stop" and not page["notes"])


def running_replica_ids(dashboard: str) -> dict[str, str]:
    deployments = app_status(dashboard).get("deployments", {})
    return {replica["replica_id"]: name for name, deployment in deployments.items()
            for replica in deployment.get("replicas", []) if replica["state"] == "RUNNING"}


def info(port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/v1/info", timeout=10).json()


def deploy_and_wait(path: Path, dashboard: str, port: int, in_force, replaced: set = frozenset()) -> None:
    """`serve deploy`, then wait until the change is in force, the app RUNNING and `replaced` replicas gone."""
    serve_deploy(path, dashboard)
    wait_for(lambda: in_force(info(port)) and app_status(dashboard).get("status") == "RUNNING"
              and not (replaced & set(running_replica_ids(dashboard))), 240, f"update {path.name}")


def test_rolling_updates_by_serve_deploy_under_load_lose_no_request(head_node, tmp_path):
    from load.soak_scenarios import rolling_update

    dashboard, port = head_node["dashboard"], head_node["http_port"]
    base_path = write_config(tmp_path, port, cpu_only=True)
    base = yaml.safe_load(base_path.read_text())
    model_dir = base["applications"][0]["args"]["model_dir"]
    deploy_and_wait(base_path, dashboard, port, lambda i: i["settings"]["model_dir"] == model_dir,
                    replaced=set(running_replica_ids(dashboard)))

    live = yaml.safe_load(base_path.read_text())
    ocr = next(d for d in live["applications"][0]["deployments"] if d["name"] == "OCRModel")
    ocr["user_config"]["batch_wait_timeout_s"] = 0.02
    live_path = tmp_path / "live_knob.yaml"
    live_path.write_text(yaml.safe_dump(live))

    stage = yaml.safe_load(live_path.read_text())
    pre = next(d for d in stage["applications"][0]["deployments"] if d["name"] == "Preprocessor")
    assert pre["user_config"]["limits"]["max_pages"] == 50
    pre["user_config"]["limits"]["max_pages"] = 1  # the Preprocessor's limits only
    stage_path = tmp_path / "preprocessor_limits.yaml"
    stage_path.write_text(yaml.safe_dump(stage))

    resized = yaml.safe_load(stage_path.read_text())
    pre = next(d for d in resized["applications"][0]["deployments"] if d["name"] == "Preprocessor")
    pre["ray_actor_options"] = {"num_cpus": 0.3}  # the Preprocessor's actors only: they restart, alone
    resized_path = tmp_path / "preprocessor_cpus.yaml"
    resized_path.write_text(yaml.safe_dump(resized))

    def preprocessor_replicas() -> set:
        return {rid for rid, name in running_replica_ids(dashboard).items() if name == "Preprocessor"}

    restart = yaml.safe_load(resized_path.read_text())
    restart["applications"][0]["args"]["readiness_timeout_s"] = 2.5  # new init args: every replica restarts
    restart_path = tmp_path / "restart.yaml"
    restart_path.write_text(yaml.safe_dump(restart))

    updates = [
        ("user_config: batch_wait_timeout_s 0.05 -> 0.02",
         lambda: deploy_and_wait(live_path, dashboard, port,
                                 lambda i: i["engine"]["batching"]["batch_wait_timeout_s"] == 0.02)),
        ("Preprocessor user_config: limits.max_pages 50 -> 1",
         lambda: deploy_and_wait(stage_path, dashboard, port, lambda i: i["preprocess"]["limits"]["max_pages"] == 1)),
        ("Preprocessor ray_actor_options: num_cpus 0.25 -> 0.3",
         lambda: deploy_and_wait(resized_path, dashboard, port, lambda i: True, replaced=preprocessor_replicas())),
        ("args: readiness_timeout_s 2.0 -> 2.5 (restarts every replica)",
         lambda: deploy_and_wait(restart_path, dashboard, port, lambda i: i["settings"]["readiness_timeout_s"] == 2.5,
                                 replaced=set(running_replica_ids(dashboard)))),
    ]
    report = rolling_update(f"http://127.0.0.1:{port}", updates, clients=2,
                            replicas=lambda: running_replica_ids(dashboard), expect_text=None)
    print(report)
    live_step, stage_step, resized_step, restart_step = report["updates"]
    assert live_step["restarted"] == []  # a live knob reconfigures the replicas in place
    assert stage_step["restarted"] == []  # the Preprocessor's limits: in place too, no other stage touched
    assert resized_step["restarted"] == ["Preprocessor"]  # its own actor options: its replicas alone
    two_pages = httpx.post(f"http://127.0.0.1:{port}/v1/ocr", timeout=60,
                           files={"file": ("two.pdf", numbered_pdf(2), "application/pdf")})
    assert two_pages.status_code == 413 and two_pages.json()["error"]["code"] == "too_many_pages", two_pages.text
    assert restart_step["restarted"] == ["Ingress", "OCRModel", "Postprocessor", "Preprocessor"]
    assert report["load"]["requests"] > 20
    assert report["load"]["failed"] == 0, report["load"]


def test_cold_start_gpu_workers_join_after_the_deploy(head_node, tmp_path):
    """The head has no GPU; `serve deploy` of a GPU config waits; GPU workers join late; it comes up."""
    config = yaml.safe_load(write_config(tmp_path, head_node["http_port"], cpu_only=True).read_text())
    args = config["applications"][0]["args"]
    args.update(ocr_num_gpus=0.5, gpu_wait_timeout_s=180, readiness_timeout_s=3.0)
    args["ocr_autoscaling"].update(min_replicas=2, max_replicas=2)  # 2 x 0.5 = 1 GPU, on the late worker
    path = tmp_path / "serve_gpu.yaml"
    path.write_text(yaml.safe_dump(config))
    serve_deploy(path, head_node["dashboard"])
    time.sleep(15)
    waiting = app_status(head_node["dashboard"])
    assert waiting.get("status") not in ("RUNNING", "DEPLOY_FAILED"), waiting  # waiting for GPUs, not failed
    worker = subprocess.Popen(
        [str(BIN / "ray"), "start", "--block", f"--address={head_node['gcs']}", "--num-cpus=2", "--num-gpus=1",
         f"--dashboard-agent-listen-port={head_node['worker_agent_port']}", f"--temp-dir={head_node['temp_dir']}",
         "--disable-usage-stats"],
        env=cli_env(), start_new_session=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    joined = time.monotonic()
    try:
        status = wait_for(lambda: (s := app_status(head_node["dashboard"])).get("status") == "RUNNING" and s,
                           240, "RUNNING after the GPU worker joined")
        print(f"cold start: RUNNING {time.monotonic() - joined:.1f}s after a 1-GPU worker joined a GPU-less head")
        running = [r for r in status["deployments"]["OCRModel"]["replicas"] if r["state"] == "RUNNING"]
        assert len(running) == 2, status["deployments"]["OCRModel"]
        assert info(head_node["http_port"])["settings"]["ocr_num_gpus"] == 0.5
    finally:
        kill_group(worker)
