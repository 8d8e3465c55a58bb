"""The cluster bring-up files: launcher YAML from an inventory, KubeRay manifest, systemd units."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import validate_config

from app.config import Settings
from cluster.make_cluster_yaml import cluster_config, read_inventory

ROOT = Path(__file__).resolve().parent.parent
NETWORK_WORDS = ("pip ", "curl", "wget", "apt", "git clone", "docker pull", "http://", "https://")


def test_inventory_of_thirty_hosts_makes_a_valid_launcher_config():
    head, workers = read_inventory(ROOT / "cluster" / "inventory.example")
    assert head == "10.20.0.11" and len(workers) == 29 and head not in workers
    config = cluster_config(head, workers, "registry.local:5000/ocr:1.2.0", "ocr", "~/.ssh/id_ed25519")
    validate_config(config)  # Ray's own cluster-config schema
    assert config["provider"] == {"type": "local", "head_ip": head, "worker_ips": workers}
    assert config["docker"]["pull_before_run"] is False
    commands = [c for key in ("initialization_commands", "setup_commands", "head_setup_commands",
                              "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")
                for c in config[key]]
    assert not [c for c in commands if any(word in c for word in NETWORK_WORDS)]
    assert "--gpus" not in " ".join(config["docker"]["run_options"])  # old Docker engines lack it


def test_inventory_head_mark_and_latest_tag(tmp_path):
    inventory = tmp_path / "hosts"
    inventory.write_text("a\nb head\n# comment\n\nc\n")
    assert read_inventory(inventory) == ("b", ["a", "c"])
    with pytest.raises(ValueError, match="latest"):
        cluster_config("b", ["a"], "registry.local:5000/ocr:latest", "ocr", "k")
    with pytest.raises(ValueError):
        cluster_config("b", ["a"], "registry.local:5000/ocr", "ocr", "k")


def test_kuberay_manifest_parses_and_carries_valid_args():
    manifest = next(doc for doc in yaml.safe_load_all((ROOT / "cluster" / "kuberay-rayservice.yaml").read_text())
                    if doc["kind"] == "RayService")
    assert manifest["kind"] == "RayService"
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    settings = Settings.model_validate(serve_config["applications"][0]["args"])
    assert settings.engine == "vlm" and settings.ocr_num_gpus == 0.25
    images = [c["image"] for c in manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]]
    assert all(not image.endswith(":latest") and ":" in image for image in images)


@pytest.mark.parametrize("unit", ["ray-head.service", "ray-worker@.service"])
def test_systemd_units_restart_ray(unit):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read(ROOT / "cluster" / "systemd" / unit)
    assert parser["Service"]["Restart"] == "always"
    assert "ray-node.sh" in parser["Service"]["ExecStart"]


def test_the_redis_unit_runs_the_projects_script_closed():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read(ROOT / "cluster" / "systemd" / "ocr-redis.service")
    service = parser["Service"]
    assert service["Restart"] == "always" and "redis-node.sh" in service["ExecStart"]
    assert service["User"] != "root" and service["NoNewPrivileges"] == "true"
    script = (ROOT / "cluster" / "redis-node.sh").read_text()
    for line in ("port 0", "appendonly yes", "maxmemory-policy noeviction", "tls-port $port", "requirepass $password"):
        assert line in script, line
    assert "redis-server -" in script  # the config, password included, on stdin: not on disk, not in ps
