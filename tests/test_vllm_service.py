"""The whole graph with `engine: vllm`, as `make run-vllm` serves it: `python -m app` under the vLLM
environment (.venv-vllm), its own Ray instance, the tiny Qwen2.5-VL with its weights manifest, real HTTP.
Ctrl-C then leaves no Ray or vLLM process behind."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from app.ops.weights import write_manifest
from app.synthetic import png_bytes, render_text_page
from app.testkit.ports import free_port
from app.testkit.processes import kill_group
from app.testkit.waits import wait_for
from app.tools.tiny_vlm import build_qwen2_5_vl

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
pytestmark = pytest.mark.own_cluster


@pytest.fixture(scope="module")
def vllm_service(tmp_path_factory):
    assert VLLM_PYTHON.exists(), "the vLLM environment is missing: make install-vllm (make test builds it)"
    base = tmp_path_factory.mktemp("vllm-service")
    model_dir = build_qwen2_5_vl(base / "tiny-qwen")
    write_manifest(model_dir)  # verify_weights: full, as shipped
    config = base / "serve_vllm.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"args": {
        "ocr_replicas": 1, "ocr_num_cpus": 1, "orientation": "off",
        "vllm": {"dtype": "float32", "max_tokens": 24, "enforce_eager": True, "max_num_seqs": 8,
                 "max_model_len": 2048}}}]}))
    port, metrics_port = free_port(), free_port()
    command = [str(VLLM_PYTHON), "-m", "app", "--port", str(port), "--config", str(config), "--engine", "vllm",
               "--model-dir", str(model_dir), "--num-cpus", "4", "--data-dir", str(base / "data"),
               "--metrics-port", str(metrics_port), "--dashboard-port", str(free_port()),
               "--temp-dir", tempfile.mkdtemp(prefix="ocr-vl-"), "--stop-timeout", "3"]  # short: Ray's socket paths
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    log = (base / "service.log").open("w")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert process.poll() is None, (base / "service.log").read_text()[-3000:]  # died: say why, at once
            return httpx.get(f"{url}/readyz", timeout=5).status_code == 200

        wait_for(ready, 420, "the vllm service ready", not_up_yet=(httpx.HTTPError,))
        yield {"url": url, "process": process, "log": base / "service.log", "metrics": metrics_port}
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        kill_group(process)
        log.close()


def ocr(url: str, image: bytes) -> dict:
    response = httpx.post(f"{url}/v1/ocr", files={"file": ("p.png", image, "image/png")}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def test_eight_concurrent_requests_read_what_one_reads_through_the_vllm_engine(vllm_service):
    url = vllm_service["url"]
    images = [png_bytes(render_text_page([f"vLLM service page {i}", "0123456789"], width=300 + 40 * i))
              for i in range(2)]
    alone = [ocr(url, image) for image in images]
    assert {body["engine"]["name"] for body in alone} == {"vllm"}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda i: ocr(url, images[i % 2]), range(8)))
    for index, body in enumerate(together):
        expected, got = alone[index % 2]["pages"][0], body["pages"][0]
        assert (got["text"], got["finish_reason"], got["valid"]) == (
            expected["text"], expected["finish_reason"], expected["valid"])
    assert alone[0]["pages"][0]["text"] != alone[1]["pages"][0]["text"]  # two pages, two readings
    info = httpx.get(f"{url}/v1/info", timeout=30).json()
    assert info["engine"]["name"] == "vllm" and info["engine"]["queue"] == {"running": 0, "waiting": 0}
    # The engine's own metrics, as Prometheus scrapes them: 10 pages read (2 warm-up pages before them).
    tokens = sum(body["pages"][0]["generated_tokens"] for body in alone + together)

    def scraped() -> dict:
        text = httpx.get(f"http://127.0.0.1:{vllm_service['metrics']}/metrics", timeout=10).text
        values = {}
        for line in text.splitlines():
            for name in ("ray_ocr_engine_generated_tokens_total", "ray_ocr_engine_time_to_first_token_seconds_count",
                         'ray_ocr_engine_pages{'):
                if line.startswith(name) and ('state="running"' in line or name != 'ray_ocr_engine_pages{'):
                    values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return values if values.get("ray_ocr_engine_time_to_first_token_seconds_count", 0) >= 12 else {}

    values = wait_for(scraped, 60, "the engine metrics exported")
    assert values["ray_ocr_engine_generated_tokens_total"] >= tokens  # the warm-up's tokens come on top
    assert values['ray_ocr_engine_pages{'] == 0  # nothing running once every request is answered


def test_ctrl_c_leaves_no_ray_or_vllm_process(vllm_service):
    process = vllm_service["process"]
    children = {child.pid for child in psutil.Process(process.pid).children(recursive=True)}
    assert children, "the service runs Ray and vLLM processes under it"
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(90)
    print(f"stopped in {time.monotonic() - started:.1f} s")
    left = [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert left == [], [psutil.Process(pid).cmdline()[:3] for pid in left]
    assert "EngineCore" in vllm_service["log"].read_text() or "vllm" in vllm_service["log"].read_text().lower()
