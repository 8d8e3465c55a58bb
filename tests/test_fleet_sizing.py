"""serve_config.yaml's fleet sizing names the figures the benchmark reports hold (load/fleet_sizing.py)."""

from __future__ import annotations

from pathlib import Path

from load import fleet_sizing

ROOT = Path(__file__).resolve().parent.parent


def test_serve_config_sizes_the_fleet_from_the_measured_figures_and_says_the_gpu_one_is_unmeasured():
    text = (ROOT / "serve_config.yaml").read_text()
    figures = fleet_sizing.figures()
    assert f"measured: {figures['preprocessor_pages_per_cpu']} pages/s per Preprocessor CPU" in text
    assert f"measured: {figures['ocr_cpu_pages_per_replica']} pages/s per OCR replica on a CPU" in text
    assert "python load/cpu_cost.py --before 54acd8c" in text and "python load/bench.py" in text
    if figures["ocr_gpu_pages_per_replica"] is None:
        assert "GPU: unmeasured" in text
