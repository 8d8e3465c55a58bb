"""A job outlives the whole service: `python -m app` stopped with Ctrl-C mid-job and started again
on the same data directory goes on from the pages not done and ends with every page once. The second
Ctrl-C, on the service as `make run` leaves it, must stop it within 10 s and leave no Ray process."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import free_port
from app.testkit.documents import numbered_pdf
from app.testkit.local_runner import LocalRunner, ctrl_c, kill, start_local_runner
from app.testkit.processes import ray_processes

ROOT = Path(__file__).resolve().parent.parent
PAGES = 30
STOP_WITHIN_S = 10
pytestmark = pytest.mark.own_cluster  # each start is a Ray instance of its own, as `make run` is

# Short leases, so that the lease the stopped runner held lapses in seconds after the restart.
ARGS = {"engine_threads": 1, "ocr_replicas": 2, "jobs": {"lease_s": 3, "max_inflight_pages": 2}}


def start_service(config: Path, data_dir: Path, port: int) -> LocalRunner:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    return start_local_runner(["--port", str(port), "--num-cpus", "2", "--config", str(config), "--data-dir",
                               str(data_dir), "--metrics-port", str(free_port()), "--dashboard-port",
                               str(free_port())], env)


def test_a_job_resumes_after_ctrl_c_and_restart_and_ctrl_c_leaves_no_ray_process(tmp_path):
    before = ray_processes()
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"args": ARGS}]}))
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    document = numbered_pdf(PAGES, "Restart")

    service = start_service(config, data_dir, port)
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            job = client.post("/v1/jobs", files={"file": ("d.pdf", document, "application/pdf")}).json()
            deadline = time.monotonic() + 120
            while (status := client.get(f"/v1/jobs/{job['id']}").json())["pages"]["done"] < 3:
                assert time.monotonic() < deadline, status
                time.sleep(0.2)
        ctrl_c(service)
    finally:
        kill(service)
    done_before = status["pages"]["done"]
    assert status["status"] == "running" and done_before < PAGES, status  # stopped mid-job

    service = start_service(config, data_dir, port)
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            again = client.get(f"/v1/jobs/{job['id']}").json()
            assert again["pages"]["done"] >= done_before  # what was done before the stop was kept
            deadline = time.monotonic() + 300
            while (final := client.get(f"/v1/jobs/{job['id']}", params={"wait": 5}).json())["status"] in (
                    "queued", "running"):
                assert time.monotonic() < deadline, final
            result = client.get(job["result_url"]).json()
        print(f"stopped at {done_before}/{PAGES} pages; after the restart {again['pages']}; final {final['pages']}")
        assert final["status"] == "succeeded" and final["pages"] == {"total": PAGES, "done": PAGES, "failed": 0}
        assert [page["page_number"] for page in result["pages"]] == list(range(1, PAGES + 1))  # each page once
        for number, page in enumerate(result["pages"], start=1):
            assert f"Serial {number * 37 + 1000}" in page["text"], (number, page["text"])
        stopped_s = ctrl_c(service)
        print(f"python -m app stopped {stopped_s:.1f}s after Ctrl-C")
        assert stopped_s < STOP_WITHIN_S
        deadline = time.monotonic() + 5
        while (left := set(ray_processes()) - set(before)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, {pid: ray_processes().get(pid) for pid in left}
    finally:
        kill(service)
        for pid in set(ray_processes()) - set(before):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
