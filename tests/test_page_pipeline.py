"""One page pipeline (app/pipeline/page_pipeline.py) for requests and jobs: a page whose OCR replica dies
mid-page is sent again under the one retry rule, and both a request and a job end correct."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from app.synthetic import png_bytes, render_text_page


@pytest.fixture(scope="module")
def dying(service_url, tmp_path_factory):
    """An application whose toy OCR replicas die on the page that finds `die` in their folder."""
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    folder = tmp_path_factory.mktemp("die")
    store = Path(tempfile.mkdtemp(prefix="ocr-dying-jobs-")) / "jobs.sqlite3"
    args = {"engine": "tests.toy_engine:ToyEngine", "engine_threads": 1, "ocr_replicas": 2, "ocr_num_cpus": 0.2,
            "engine_options": {"label": "toy-d", "delay_s": 0.05, "max_side": 400, "die_when": str(folder / "die")},
            "jobs": {"store": f"sqlite:///{store}", "lease_s": 3}}
    deploy(build_app(args), name="dying", route_prefix="/dying", timeout_s=240)
    yield f"{service_url}/dying", folder / "die"
    serve.delete("dying")


def ocr_replicas_running() -> int:
    from ray import serve

    status = serve.status().applications["dying"].deployments["OCRModel"]
    return status.replica_states.get("RUNNING", 0)


def test_a_page_whose_ocr_replica_dies_is_read_again_in_a_request_and_in_a_job(dying, client):
    url, die = dying
    image = render_text_page(["Page of a replica that dies"], width=400)
    expected = f"toy-d 400x{image.size[1]}"

    die.touch()
    response = client.post(f"{url}/v1/ocr", files={"file": ("p.png", png_bytes(image), "image/png")})
    assert not die.exists(), "no OCR replica took the page that kills it"
    assert response.status_code == 200, response.text
    assert response.json()["pages"][0]["text"] == expected

    deadline = time.monotonic() + 60
    while ocr_replicas_running() < 2 and time.monotonic() < deadline:  # Serve replaces the dead replica
        time.sleep(0.5)
    die.touch()
    job = client.post(f"{url}/v1/jobs", files={"file": ("p.png", png_bytes(image), "image/png")}).json()
    deadline = time.monotonic() + 120
    while (status := client.get(f"{url}/v1/jobs/{job['id']}").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert not die.exists(), "no OCR replica took the job's page that kills it"
    assert status["status"] == "succeeded" and status["pages"] == {"total": 1, "done": 1, "failed": 0}, status
    result = client.get(f"{url}/v1/jobs/{job['id']}/result").json()
    assert result["pages"][0]["text"] == expected
