"""TLS on every hop, set up as operators do, with a throwaway CA made here by cluster/make-tls.sh.

The fleet's Redis is started by the project's own `cluster/redis-node.sh` (TLS only, a password
from a file, AOF, noeviction), the service by `python -m app --tls-cert --tls-key` with its jobs
in that Redis over `rediss://`, and the ocr-client sends a document through both with --ca-bundle.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from app.http.auth import add_key
from app.testkit.ports import free_port
from app.testkit.waits import wait_for
from app.testkit.local_runner import local_runner

pytestmark = pytest.mark.own_cluster  # python -m app on https: a Ray instance of its own, as `make run` is
from tests.conftest import TEST_LIMITS, png_bytes, render_text_page

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki") / "tls"
    subprocess.run(["bash", str(ROOT / "cluster" / "make-tls.sh"), str(directory), "localhost"], check=True,
                   capture_output=True)
    return directory


@pytest.fixture(scope="module")
def fleet_redis(pki, tmp_path_factory):
    """(port, password file) of cluster/redis-node.sh, as the systemd unit runs it."""
    work = tmp_path_factory.mktemp("fleet-redis")
    password = work / "redis_password"
    password.write_text("redis-test-" + os.urandom(8).hex() + "\n")
    password.chmod(0o600)
    port = free_port()
    env = {**os.environ, "OCR_TLS_DIR": str(pki), "OCR_REDIS_PASSWORD_FILE": str(password),
           "OCR_REDIS_DIR": str(work / "data"), "OCR_REDIS_PORT": str(port), "OCR_REDIS_BIND": "127.0.0.1"}
    process = subprocess.Popen(["bash", str(ROOT / "cluster" / "redis-node.sh")], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: tls_redis(port, pki, password).ping(), 20, "redis-node.sh",
                 not_up_yet=(redis.ConnectionError, OSError), poll_s=0.2)
        yield port, password
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


def tls_redis(port: int, pki: Path, password: Path) -> redis.Redis:
    return redis.Redis.from_url(f"rediss://localhost:{port}/0", password=password.read_text().strip(),
                                ssl_ca_certs=str(pki / "ca.crt"), ssl_cert_reqs="required", socket_timeout=5)


@pytest.fixture(scope="module")
def https_service(pki, fleet_redis, tmp_path_factory):
    """python -m app on https, with API keys and its jobs in the fleet Redis over rediss://."""
    port_redis, password = fleet_redis
    work = Path(tempfile.mkdtemp(prefix="ocr-tls-"))  # short: Ray's socket paths live under it
    keys = work / "api_keys"
    key = add_key(keys, "archive")
    args = {"engine": "ppocr", "engine_threads": 1, "ocr_replicas": 1, "limits": TEST_LIMITS,
            "auth": {"api_keys_file": str(keys)},
            "jobs": {"store": f"rediss://localhost:{port_redis}/0", "redis_ca_file": str(pki / "ca.crt"),
                     "redis_password_file": str(password), "lease_s": 3}}
    config = work / "serve.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"args": args}]}))
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_AUTH_MODE", None)
    arguments = ["--port", str(port), "--num-cpus", "2", "--config", str(config),
                 "--tls-cert", str(pki / "node.crt"), "--tls-key", str(pki / "node.key"),
                 "--metrics-port", str(free_port()), "--dashboard-port", str(free_port()), "--temp-dir", str(work / "ray")]
    with local_runner(arguments, env) as runner:
        yield {"url": f"https://localhost:{port}", "port": port, "key": key, "printed": runner.printed}


def test_the_api_answers_https_with_the_fleets_certificate_only(https_service, pki, invoice_png):
    assert "ready at https://" in https_service["printed"]
    trusted = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    headers = {"Authorization": f"Bearer {https_service['key']}"}
    with httpx.Client(base_url=https_service["url"], verify=trusted, headers=headers, timeout=120) as client:
        answer = client.post("/v1/ocr", files={"file": ("invoice.png", invoice_png, "image/png")})
        assert answer.status_code == 200 and "INVOICE 4711" in answer.json()["text"]
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # a CA it was not signed by
        httpx.get(f"{https_service['url']}/healthz", timeout=10)
    with pytest.raises(httpx.HTTPError):  # plaintext to the TLS port gets no HTTP answer
        httpx.get(f"http://localhost:{https_service['port']}/healthz", timeout=10)


def test_a_job_goes_through_https_and_the_fleet_redis_over_tls(https_service, pki, fleet_redis, tmp_path):
    port_redis, password = fleet_redis
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "ledger.png").write_bytes(png_bytes(render_text_page(["Ledger 1907", "Folio 4711"])))
    key_file = tmp_path / "key"
    key_file.write_text(https_service["key"])
    client = [sys.executable, "-m", "app.client", str(folder), "--out", str(tmp_path / "out"), "--url",
              https_service["url"], "--api-key-file", str(key_file), "--no-progress"]
    untrusted = subprocess.run(client, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stdout + untrusted.stderr
    done = subprocess.run(client + ["--ca-bundle", str(pki / "ca.crt")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Folio 4711" in (tmp_path / "out" / "ledger.md").read_text()
    store = tls_redis(port_redis, pki, password)
    assert list(store.scan_iter("ocrjobs:job:*"))  # the job lived in the fleet's Redis
    assert store.info("persistence")["aof_enabled"] == 1 and store.info("memory")["maxmemory_policy"] == "noeviction"
    with pytest.raises(redis.ConnectionError):  # the store's port speaks TLS only
        redis.Redis(port=port_redis, password=password.read_text().strip(), socket_timeout=3).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(f"rediss://localhost:{port_redis}/0", ssl_ca_certs=str(pki / "ca.crt"),
                             socket_timeout=5).set("x", "y")


def test_redis_node_refuses_to_start_without_a_private_password_or_tls(pki, tmp_path):
    loose = tmp_path / "redis_password"
    loose.write_text("pw\n")
    loose.chmod(0o644)
    env = {**os.environ, "OCR_TLS_DIR": str(pki), "OCR_REDIS_PASSWORD_FILE": str(loose),
           "OCR_REDIS_DIR": str(tmp_path / "data")}
    refused = subprocess.run(["bash", str(ROOT / "cluster" / "redis-node.sh")], env=env, capture_output=True,
                             text=True, timeout=30)
    assert refused.returncode != 0 and "mode 644" in refused.stderr
    loose.chmod(0o600)
    env["OCR_TLS_DIR"] = str(tmp_path / "no-tls")
    refused = subprocess.run(["bash", str(ROOT / "cluster" / "redis-node.sh")], env=env, capture_output=True,
                             text=True, timeout=30)
    assert refused.returncode != 0 and "TLS only" in refused.stderr


def test_python_m_app_refuses_plaintext_on_the_network(tmp_path, capsys):
    from app.__main__ import main

    keys = tmp_path / "api_keys"
    add_key(keys, "k")
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"args": {"auth": {"api_keys_file": str(keys)}}}]}))
    assert main(["--host", "0.0.0.0", "--config", str(config)]) == 2
    assert "in clear" in capsys.readouterr().err
    assert main(["--host", "0.0.0.0", "--config", str(config), "--tls-cert", str(tmp_path / "absent.crt"),
                 "--tls-key", str(tmp_path / "absent.key")]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert main(["--host", "0.0.0.0", "--config", str(config), "--tls-cert", str(keys)]) == 2
    assert "go together" in capsys.readouterr().err


def test_preflight_checks_the_tls_files_and_the_fleet_redis(pki, fleet_redis, tmp_path):
    import shutil

    from cluster import preflight

    port, password = fleet_redis
    assert preflight.check_tls_files(str(pki)).status == "PASS"
    stranger = tmp_path / "stranger"
    subprocess.run(["bash", str(ROOT / "cluster" / "make-tls.sh"), str(stranger), "localhost"], check=True,
                   capture_output=True)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(pki / "ca.crt", mixed / "ca.crt")
    for name in ("node.crt", "node.key"):
        shutil.copy(stranger / name, mixed / name)
    assert preflight.check_tls_files(str(mixed)).status == "FAIL"  # signed by another CA
    (mixed / "node.key").chmod(0o644)
    assert "chmod 600" in preflight.check_tls_files(str(mixed)).detail
    good = preflight.check_job_store(f"rediss://localhost:{port}/0", str(pki / "ca.crt"), str(password))
    assert good.status == "PASS", good
    wrong_ca = preflight.check_job_store(f"rediss://localhost:{port}/0", str(stranger / "ca.crt"), str(password))
    assert wrong_ca.status == "FAIL" and "certificate" in wrong_ca.detail.lower(), wrong_ca


def test_a_job_whose_document_redis_lost_fails_once_instead_of_being_claimed_forever(https_service, pki,
                                                                                        fleet_redis):
    import time
    import uuid

    from app.jobs.model import Job
    from app.settings.jobs import Jobs
    from app.jobs.stores import open_store
    from app.testkit.jobs import wait_finished

    port_redis, password = fleet_redis
    store = open_store(Jobs(store=f"rediss://localhost:{port_redis}/0", redis_ca_file=str(pki / "ca.crt"),
                            redis_password_file=str(password)))
    # Held under a lease of the test's own, so that no runner claims it before its document is gone.
    held = Job(id=uuid.uuid4().hex, client="archive", pages=[1], document_sha256="0" * 64,
               content_type="image/png", owner="test", lease_until=time.time() + 600)
    job, _ = store.create(held, png_bytes(render_text_page(["Victim"])))
    assert tls_redis(port_redis, pki, password).delete(f"ocrjobs:doc:{job.id}:0") == 1  # as an evicting Redis
    store.release(job.id, "test")
    trusted = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    headers = {"Authorization": f"Bearer {https_service['key']}"}
    with httpx.Client(base_url=https_service["url"], verify=trusted, headers=headers, timeout=120) as client:
        status = wait_finished(client, job.id, timeout_s=60)
        assert status["status"] == "failed" and status["error"]["code"] == "document_lost", status
        client.delete(f"/v1/jobs/{job.id}")
    store.close()
