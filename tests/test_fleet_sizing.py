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


def test_the_cpu_stage_at_its_ceiling_feeds_the_gpu_stage_at_its_ceiling():
    """The sizing's arithmetic, not its prose: the Preprocessors at max_replicas, at the measured pages/s
    per CPU, read at least what the OCR replicas at max_replicas read (at the assumed GPU rate)."""
    import yaml

    from app.config import Settings

    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]
    settings = Settings.model_validate(config["args"])
    pre = next(d for d in config["deployments"] if d["name"] == "Preprocessor")
    figures = fleet_sizing.figures()
    per_replica = figures["ocr_gpu_pages_per_replica"] or fleet_sizing.ASSUMED_GPU_PAGES_PER_REPLICA
    if not isinstance(per_replica, (int, float)):  # a GPU report exists but gives no rate yet
        per_replica = fleet_sizing.ASSUMED_GPU_PAGES_PER_REPLICA
    cpu_pages_s = (pre["autoscaling_config"]["max_replicas"] * pre["ray_actor_options"]["num_cpus"]
                   * figures["preprocessor_pages_per_cpu"])
    gpu_pages_s = settings.ocr_autoscaling.max_replicas * per_replica
    assert cpu_pages_s >= gpu_pages_s, (cpu_pages_s, gpu_pages_s)
