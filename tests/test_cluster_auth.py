"""The cluster scripts start Ray closed: token authentication on, the dashboard on loopback only.

A head started by the project's own `cluster/ray-node.sh` refuses a Ray job submitted without
the token and runs it with the token. A static check keeps every file in cluster/ closed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from app.testkit.processes import kill_group, kill_leftovers
from app.testkit.waits import wait_for

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.own_cluster


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env.update(PATH=f"{BIN}:{env['PATH']}", PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """`cluster/ray-node.sh head` with a token file of mode 0600, on ports of its own."""
    base = tmp_path_factory.mktemp("ray-auth")
    token = base / "ray_auth_token"
    subprocess.run(["bash", str(ROOT / "cluster" / "make-ray-token.sh"), str(token)], check=True, capture_output=True)
    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's deep one.
    temp_dir = tempfile.mkdtemp(prefix="ocr-ray-")
    ports = {name: str(free_port()) for name in ("GCS", "DASHBOARD", "CLIENT", "NODE_MANAGER", "OBJECT_MANAGER",
                                                 "RUNTIME_ENV_AGENT", "DASHBOARD_AGENT_GRPC", "DASHBOARD_AGENT",
                                                 "METRICS")}
    env = _env(RAY_AUTH_TOKEN_PATH=str(token), OCR_NUM_GPUS="0", OCR_NUM_CPUS="2", OCR_RAY_TEMP_DIR=temp_dir,
               OCR_MIN_WORKER_PORT="0", OCR_MAX_WORKER_PORT="0",
               **{f"OCR_{name}_PORT": port for name, port in ports.items()})
    process = subprocess.Popen(["bash", str(ROOT / "cluster" / "ray-node.sh"), "head"], env=env, cwd=ROOT,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dashboard = f"http://127.0.0.1:{ports['DASHBOARD']}"
    try:
        wait_for(lambda: httpx.get(f"{dashboard}/api/version", timeout=2).status_code in (200, 401), 150, "dashboard")
        yield {"dashboard": dashboard, "token": token}
    finally:
        kill_group(process)
        kill_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def submit(dashboard: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ray"), "job", "submit", "--address", dashboard, "--", "python", "-c",
                           "print('job ran', 6 * 7)"], env=env, capture_output=True, text=True, timeout=180)


def test_a_job_without_the_token_is_refused_and_with_it_runs(token_head, tmp_path):
    dashboard, token = token_head["dashboard"], token_head["token"]
    assert httpx.get(f"{dashboard}/api/jobs/", timeout=10).status_code == 401
    stranger = submit(dashboard, _env(HOME=str(tmp_path), RAY_AUTH_MODE="disabled"))  # no token anywhere
    assert stranger.returncode != 0, stranger.stdout
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64 + "\n")
    wrong.chmod(0o600)
    guesser = submit(dashboard, _env(HOME=str(tmp_path), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(wrong)))
    assert guesser.returncode != 0, guesser.stdout
    started = time.monotonic()
    member = submit(dashboard, _env(HOME=str(tmp_path), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token)))
    assert member.returncode == 0, member.stderr[-2000:]
    assert "job ran 42" in member.stdout
    print(f"no token: refused (rc {stranger.returncode}); wrong token: refused (rc {guesser.returncode}); "
          f"the token: ran in {time.monotonic() - started:.1f}s")


def test_ray_node_refuses_to_start_without_a_private_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o644)
    loose = subprocess.run(["bash", str(ROOT / "cluster" / "ray-node.sh"), "head"],
                           env=_env(RAY_AUTH_TOKEN_PATH=str(token)), capture_output=True, text=True, timeout=30)
    assert loose.returncode != 0 and "mode 644" in loose.stderr
    missing = subprocess.run(["bash", str(ROOT / "cluster" / "ray-node.sh"), "worker", "10.0.0.1"],
                             env=_env(RAY_AUTH_TOKEN_PATH=str(tmp_path / "absent")), capture_output=True, text=True,
                             timeout=30)
    assert missing.returncode != 0 and "no Ray token" in missing.stderr


CLOSED_FILES = ["ray-node.sh", "entrypoint.sh", "make_cluster_yaml.py", "systemd/ray-head.service",
                "systemd/ray-worker@.service"]


@pytest.mark.parametrize("name", CLOSED_FILES)
def test_no_cluster_script_disables_auth_or_opens_the_dashboard(name):
    text = (ROOT / "cluster" / name).read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "RAY_AUTH_MODE=disabled" not in code and "RAY_AUTH_MODE:-disabled" not in code
    assert not re.search(r"dashboard-host[= ]+\"?0\.0\.0\.0", code), name


def test_launcher_yaml_and_kuberay_start_ray_with_token_auth():
    import yaml

    from cluster.make_cluster_yaml import cluster_config

    config = cluster_config("h", ["w"], "registry.local:5000/ocr:1.2.0", "ocr", "k")
    for command in config["head_start_ray_commands"][1:] + config["worker_start_ray_commands"][1:]:
        assert "RAY_AUTH_MODE=token" in command and "RAY_AUTH_TOKEN_PATH=" in command
    assert "--dashboard-host=127.0.0.1" in config["head_start_ray_commands"][1]
    manifest = yaml.safe_load((ROOT / "cluster" / "kuberay-rayservice.yaml").read_text())
    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for pod in pods:
        for container in pod["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ocr-ray-token"
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert serve_config["applications"][0]["args"]["auth"]["api_keys_file"].startswith("/etc/ocr/secrets/")
