"""The `vllm` engine on this CPU, in its own environment (.venv-vllm, `make install-vllm`; make test builds it).

Each check runs tests/vllm_checks.py under the vLLM environment's Python on the tiny random
Qwen2.5-VL (fp32) built here, and asserts on what it wrote. No skips: a missing environment fails.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from app.tools.tiny_vlm import build_qwen2_5_vl

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    return build_qwen2_5_vl(tmp_path_factory.mktemp("vllm") / "tiny-qwen")


@pytest.fixture(scope="module")
def checks(tiny_qwen, tmp_path_factory) -> dict:
    """Every check's findings, from one process of the vLLM environment (vLLM is imported once)."""
    return run_check("all", tiny_qwen, tmp_path_factory.mktemp("checks"))


def run_check(name: str, model_dir: Path, tmp_path: Path) -> dict:
    assert VLLM_PYTHON.exists(), "the vLLM environment is missing: make install-vllm (make test builds it)"
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / "vllm_checks.py"), name, str(model_dir), str(out)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_vllm_reads_every_page_token_for_token_as_the_transformers_engine(checks):
    """Greedy, fp32: vLLM's tokens equal the `vlm` engine's for each page (the check that would have
    caught the missing image positions of issue 24); 8 pages at once read as each alone."""
    seen = checks["agree"]
    for expected, got in zip(seen["transformers"], seen["vllm"], strict=True):
        assert len(expected) >= 12 and got[:16] == expected[:16], (expected, got)
        assert got == expected
    assert seen["concurrent"] == seen["single"] + seen["single"]
    assert len(set(seen["single"])) == 4  # four different pages, four different readings
    # The cap and the end token come through: pages cut at max_tokens (24) are "length", one that ended is "stop".
    assert seen["tokens"] == [len(expected) for expected in seen["transformers"]]
    assert seen["finish"] == ["length" if len(expected) == 24 else "stop" for expected in seen["transformers"]]
    assert "stop" in seen["finish"] and "length" in seen["finish"]


def test_short_pages_finish_before_a_long_one_sent_with_them(checks):
    """No head-of-line blocking: 1 page forced to 256 tokens and 7 to 16, sent together."""
    finished = checks["hol"]["finished_s"]
    long_done = next(at for length, at in finished if length == 256)
    shorts = [at for length, at in finished if length == 16]
    assert len(shorts) == 7 and max(shorts) < long_done / 2, finished


def test_a_cancelled_page_leaves_the_engine_within_a_second(checks):
    seen = checks["abort"]
    assert seen["running_before"] == 1 and seen["running_after"] == 0, seen
    scheduler = seen["scheduler"]  # vLLM's stat logger reported the page running, and its KV cache in use
    assert scheduler["steps"] > 0 and (scheduler["running"], scheduler["waiting"]) == (1, 0), scheduler
    assert 0 < scheduler["kv_cache_usage"] <= 1, scheduler
    assert seen["seconds_to_drop"] < 1.0, seen


def test_max_model_len_stays_within_the_models_positions(tiny_qwen):
    """vLLM refuses to start past the model's positions: `make run-vllm` with the defaults (8192) on a
    checkpoint of 4096 positions must still serve."""
    from app.config import Settings
    from app.engines.base import EngineRuntime
    from app.engines.vllm_engine import VLLMEngine

    def max_model_len(**vllm) -> int:
        settings = Settings(engine="vllm", model_dir=str(tiny_qwen), vllm={"verify_weights": "off", **vllm})
        return VLLMEngine(settings.vllm, EngineRuntime(model_dir=str(tiny_qwen), threads=1)).engine_args()["max_model_len"]

    assert max_model_len() == 4096  # the tiny model's max_position_embeddings, under the default 8192
    assert max_model_len(max_model_len=2048) == 2048
