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
from tests.test_openai_api import head_of_line, page, page_message, sdk, streamed

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
CAP = 3000  # tokens a page may write: room for a page that runs for seconds (the disconnect test)
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
        "vllm": {"dtype": "float32", "max_tokens": CAP, "enforce_eager": True, "max_num_seqs": 8,
                 "max_model_len": 4096}}}]}))
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
    assert info["engine"]["name"] == "vllm" and (info["engine"]["queue"]["running"], info["engine"]["queue"]["waiting"]) == (0, 0)
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
        # Ray exports each metric on its own schedule: wait until both the first tokens and the tokens
        # counted at each page's end have arrived (a count of one per page would never get there).
        exported = values.get("ray_ocr_engine_time_to_first_token_seconds_count", 0) >= 12 and \
            values.get("ray_ocr_engine_generated_tokens_total", 0) >= tokens
        return values if exported else {}

    values = wait_for(scraped, 60, "the engine metrics exported")
    assert values["ray_ocr_engine_generated_tokens_total"] >= tokens  # the warm-up's tokens come on top
    assert values['ray_ocr_engine_pages{'] == 0  # nothing running once every request is answered


def test_the_openai_sdk_reads_what_v1_ocr_reads_through_vllm(vllm_service):
    url = vllm_service["url"]
    api = sdk(url)
    [model] = api.models.list().data
    assert model.model_extra["engine"] == "vllm"
    image = png_bytes(render_text_page(["OpenAI through vLLM", "0123456789"], width=320))
    expected = ocr(url, image)["pages"][0]
    answer = api.chat.completions.create(model=model.id, messages=page_message(image))
    assert answer.choices[0].message.content == expected["text"]
    assert answer.usage.completion_tokens == expected["generated_tokens"] and answer.usage.prompt_tokens > 0
    pieces, chunks = streamed(api, model.id, page_message(image))
    assert "".join(pieces) == expected["text"] and chunks[-1].usage.completion_tokens == expected["generated_tokens"]


def test_short_pages_pass_a_long_one_through_the_vllm_service(vllm_service):
    """Continuous batching: the seven 16-token pages leave the batch as they end. The same test
    on the `vlm` engine's static batches: tests/test_openai_api.py (there, they wait)."""
    timings = head_of_line(vllm_service["url"])
    print("vllm head of line:", timings)
    assert max(timings["short_s"]) < timings["long_s"], timings


def test_a_looping_page_is_cut_while_its_neighbours_finish_on_vllm(vllm_service):
    url = vllm_service["url"]
    api = sdk(url)
    model = api.models.list().data[0].id
    token = 64  # a byte-level token of the tiny tokenizer, no end token

    def ask(i: int):
        if i == 0:
            return api.chat.completions.create(model=model, messages=page_message(page(i)), max_tokens=2000,
                                               logit_bias={str(token): 100}, extra_body={"min_tokens": 1000})
        return api.chat.completions.create(model=model, messages=page_message(page(i)), max_tokens=64,
                                           extra_body={"min_tokens": 64, "ignore_eos": True})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        looped, *neighbours = pool.map(ask, range(4))
    [notes] = looped.model_extra["pages"]
    assert looped.choices[0].finish_reason == "degenerate" and notes["valid"] is False, looped
    assert notes["generated_tokens"] <= 32 + 16, "the guard aborts a looping page within one look"
    assert [answer.usage.completion_tokens for answer in neighbours] == [64, 64, 64]


def engine_running(url: str) -> int:
    return httpx.get(f"{url}/v1/info", timeout=30).json()["engine"]["queue"]["running"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_mid_page_frees_the_engine_within_a_second(vllm_service, stream):
    url = vllm_service["url"]
    model = sdk(url).models.list().data[0].id
    body = {"model": model, "messages": page_message(page(1)), "max_tokens": CAP, "min_tokens": CAP,
            "ignore_eos": True, "stream": stream}
    if stream:
        with httpx.Client(timeout=120) as client:
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                wait_for(lambda: engine_running(url) == 1, 60, "the page running in the engine")
                time.sleep(0.5)
            left_at = time.monotonic()  # the connection is closed here, mid-page
    else:
        def leave():  # waits 3 s for the answer, then gives up and closes the connection
            try:
                httpx.post(f"{url}/v1/chat/completions", json=body, timeout=httpx.Timeout(60, read=3.0))
            except httpx.ReadTimeout:
                return time.monotonic()
            return None

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            leaving = pool.submit(leave)
            wait_for(lambda: engine_running(url) == 1, 60, "the page running in the engine")
            left_at = leaving.result()
        assert left_at is not None, "the page ended before the client left: make it longer"
    wait_for(lambda: engine_running(url) == 0, 30, "the page aborted")
    seconds = time.monotonic() - left_at
    print(f"client left (stream={stream}): engine running 0 after {seconds:.2f} s")
    assert seconds < 1.0


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
