"""The cluster scripts start Ray closed: token authentication and mutual TLS on, the dashboard on loopback only.

A head started by the project's own `cluster/ray-node.sh`, with a CA made here by the project's
own `cluster/make-tls.sh`, refuses a Ray job submitted without the token and runs it with the
token, and its GCS port speaks TLS with that CA only to a peer that shows a certificate of it.
A static check keeps every file in cluster/ closed.
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
    tls = base / "tls"
    node_ip = subprocess.run([str(BIN / "python"), "-c", "import ray._private.services as s; "
                              "print(s.get_node_ip_address())"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["bash", str(ROOT / "cluster" / "make-tls.sh"), str(tls), node_ip], check=True,
                   capture_output=True)  # the address Ray picks for this node, as the inventory would list it
    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's deep one.
    temp_dir = tempfile.mkdtemp(prefix="ocr-ray-")
    ports = {name: str(free_port()) for name in ("GCS", "DASHBOARD", "CLIENT", "NODE_MANAGER", "OBJECT_MANAGER",
                                                 "RUNTIME_ENV_AGENT", "DASHBOARD_AGENT_GRPC", "DASHBOARD_AGENT",
                                                 "METRICS")}
    env = _env(RAY_AUTH_TOKEN_PATH=str(token), OCR_TLS_DIR=str(tls), OCR_NUM_GPUS="0", OCR_NUM_CPUS="2",
               OCR_RAY_TEMP_DIR=temp_dir,
               OCR_MIN_WORKER_PORT="0", OCR_MAX_WORKER_PORT="0",
               **{f"OCR_{name}_PORT": port for name, port in ports.items()})
    process = subprocess.Popen(["bash", str(ROOT / "cluster" / "ray-node.sh"), "head"], env=env, cwd=ROOT,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dashboard = f"http://127.0.0.1:{ports['DASHBOARD']}"
    try:
        wait_for(lambda: httpx.get(f"{dashboard}/api/version", timeout=2).status_code in (200, 401), 150, "dashboard")
        yield {"dashboard": dashboard, "token": token, "tls": tls, "gcs_port": int(ports["GCS"])}
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


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # and an empty SETTINGS


def h2_answer(port: int, context=None) -> bytes:
    """What the GCS sends back to an HTTP/2 preface: its SETTINGS frame, or b"" when it hangs up or refuses."""
    import socket
    import ssl

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            channel = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
            channel.sendall(PREFACE)
            channel.settimeout(5)
            return channel.recv(64)
    except (ssl.SSLError, ConnectionError, TimeoutError, OSError):
        return b""


def test_the_gcs_speaks_tls_only_to_a_peer_with_a_certificate_of_the_fleet(token_head):
    import ssl

    tls, port = token_head["tls"], token_head["gcs_port"]

    def context(with_certificate: bool):
        ctx = ssl.create_default_context(cafile=str(tls / "ca.crt"))
        if with_certificate:
            ctx.load_cert_chain(str(tls / "node.crt"), str(tls / "node.key"))
        ctx.set_alpn_protocols(["h2"])
        return ctx

    member = h2_answer(port, context(True))
    assert member[3:4] == b"\x04", member  # a SETTINGS frame: gRPC over TLS, the peer verified by the fleet CA
    assert h2_answer(port, context(False)) == b""  # no client certificate: mutual TLS refuses
    assert not h2_answer(port).startswith(b"\x00")  # gRPC in clear gets no HTTP/2 answer


def test_ray_node_refuses_to_start_without_its_tls_files(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o600)
    missing = subprocess.run(["bash", str(ROOT / "cluster" / "ray-node.sh"), "head"],
                             env=_env(RAY_AUTH_TOKEN_PATH=str(token), OCR_TLS_DIR=str(tmp_path / "absent")),
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode != 0 and "mutual TLS" in missing.stderr


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
                "systemd/ray-worker@.service", "ray-tls.sh", "redis-node.sh"]


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
        assert "RAY_USE_TLS=1" in command and "RAY_TLS_SERVER_KEY=/etc/ocr/tls/node.key" in command
    assert "--dashboard-host=127.0.0.1" in config["head_start_ray_commands"][1]
    manifest = next(doc for doc in yaml.safe_load_all((ROOT / "cluster" / "kuberay-rayservice.yaml").read_text())
                    if doc["kind"] == "RayService")
    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for pod in pods:
        for container in pod["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ocr-ray-token"
    serve_config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    assert serve_config["applications"][0]["args"]["auth"]["api_keys_file"].startswith("/etc/ocr/secrets/")
