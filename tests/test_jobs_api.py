"""/v1/jobs against the session's real Serve application (SQLite store), over real HTTP."""

from __future__ import annotations

import os
import signal
import time

from app.testkit.documents import numbered_pdf
from app.testkit.jobs import wait_finished
from load.soak_scenarios import serve_actors


def submit(client, document: bytes, **kwargs):
    return client.post("/v1/jobs", files={"file": ("doc.pdf", document, "application/pdf")}, **kwargs)


def test_a_job_reads_every_page_as_a_synchronous_request_does(client):
    document = numbered_pdf(12, "Ledger")
    accepted = submit(client, document)
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert accepted.headers["location"] == job["status_url"] == f"/v1/jobs/{job['id']}"
    assert job["pages"] == {"total": 12, "done": 0, "failed": 0}
    unfinished = client.get(job["result_url"])  # 12 CPU pages take seconds: the job is still running
    assert unfinished.status_code == 202, unfinished.text  # the status body and a retry hint
    assert unfinished.headers["retry-after"] and unfinished.json()["id"] == job["id"]
    status = wait_finished(client, job["id"])
    assert status["status"] == "succeeded" and status["pages"] == {"total": 12, "done": 12, "failed": 0}
    assert status["finished_at"] and status["expires_at"] > status["finished_at"]
    result = client.get(job["result_url"]).json()
    assert [page["page_number"] for page in result["pages"]] == list(range(1, 13))
    assert [page["index"] for page in result["pages"]] == list(range(12))
    for number in (1, 7, 12):
        sync = client.post("/v1/ocr", params={"pages": str(number)},
                           files={"file": ("doc.pdf", document, "application/pdf")}).json()
        assert result["pages"][number - 1]["text"] == sync["pages"][0]["text"]
        assert f"Serial {number * 37 + 1000}" in sync["text"]
    markdown = client.get(job["result_url"], params={"format": "markdown"})
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.text.index("Ledger page 2") < markdown.text.index("Ledger page 11")


def test_a_page_selection_is_kept(client):
    job = submit(client, numbered_pdf(6, "Chosen"), params={"pages": "2,5-6"}).json()
    assert job["pages"]["total"] == 3
    wait_finished(client, job["id"])
    result = client.get(job["result_url"]).json()
    assert [page["page_number"] for page in result["pages"]] == [2, 5, 6]
    assert "Chosen page 5" in result["pages"][1]["text"]


def test_idempotency_key_returns_the_same_job(client):
    document = numbered_pdf(2, "Once")
    first = submit(client, document, headers={"Idempotency-Key": "batch-7-file-1"})
    again = submit(client, document, headers={"Idempotency-Key": "batch-7-file-1"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = submit(client, numbered_pdf(3, "Other"), headers={"Idempotency-Key": "batch-7-file-1"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    fresh = submit(client, document, headers={"Idempotency-Key": "batch-7-file-2"})
    assert fresh.status_code == 202 and fresh.json()["id"] != first.json()["id"]
    bad = submit(client, document, headers={"Idempotency-Key": "no spaces allowed"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_idempotency_key"


def test_delete_cancels_and_removes_the_job(client):
    job = submit(client, numbered_pdf(20, "Canceled")).json()
    deleted = client.delete(f"/v1/jobs/{job['id']}")
    assert deleted.status_code == 204
    for path in (job["status_url"], job["result_url"]):
        gone = client.get(path)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "job_not_found"
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 404


def test_unknown_and_malformed_ids_are_404_json(client):
    for job_id in ("0" * 32, "not-a-job", "%2e%2e"):
        response = client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 404 and response.json()["error"]["retryable"] is False


def test_bad_documents_and_parameters_are_refused_at_submit(client):
    corrupt = client.post("/v1/jobs", content=b"%PDF-1.7 broken", headers={"content-type": "application/pdf"})
    assert corrupt.status_code == 422 and corrupt.json()["error"]["code"] == "corrupt_pdf"
    too_many = submit(client, numbered_pdf(3, "Few"), params={"pages": "1-9"})
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "invalid_pages"
    job = submit(client, numbered_pdf(1, "Wait")).json()
    assert client.get(job["status_url"], params={"wait": 61}).json()["error"]["code"] == "invalid_wait"
    assert client.get(job["result_url"], params={"format": "docx"}).status_code == 400


def test_a_job_survives_kill_9_of_an_ocr_replica_and_of_its_runner(client):
    document = numbered_pdf(30, "Survivor")
    job = submit(client, document).json()
    deadline = time.monotonic() + 120
    while client.get(job["status_url"]).json()["pages"]["done"] < 3:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    actors = serve_actors().values()
    ocr = next(a for a in actors if a["deployment"] == "OCRModel")
    runner = next(a for a in actors if a["deployment"] == "JobRunner")
    os.kill(ocr["pid"], signal.SIGKILL)
    time.sleep(1.0)
    os.kill(runner["pid"], signal.SIGKILL)
    status = wait_finished(client, job["id"])
    assert status["status"] == "succeeded", status
    assert status["pages"] == {"total": 30, "done": 30, "failed": 0}
    pages = client.get(job["result_url"]).json()["pages"]
    assert [page["page_number"] for page in pages] == list(range(1, 31))  # none missing, none twice
    for page in pages:
        assert f"Serial {page['page_number'] * 37 + 1000}" in page["text"], page["text"]


def test_with_keys_off_each_peer_is_its_own_tenant_and_a_job_id_is_still_enough_to_read_it(service_url, client):
    """Issue 37.8: with keys off every caller was tenant `-`: one quota and one Idempotency-Key namespace for
    the whole room. Now a peer's address keys them; the job itself stays readable by its id from anywhere."""
    import httpx

    document = numbered_pdf(1, "Peer")
    other = httpx.Client(base_url=service_url, timeout=120,
                         transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with other:
        first = client.post("/v1/jobs", headers={"Idempotency-Key": "same-key"},
                            files={"file": ("a.pdf", document, "application/pdf")}).json()
        second = other.post("/v1/jobs", headers={"Idempotency-Key": "same-key"},
                            files={"file": ("b.pdf", document, "application/pdf")}).json()
        assert first["id"] != second["id"]  # two tenants, two namespaces
        again = client.post("/v1/jobs", headers={"Idempotency-Key": "same-key"},
                            files={"file": ("a.pdf", document, "application/pdf")}).json()
        assert again["id"] == first["id"]
        assert other.get(first["status_url"]).status_code == 200  # the id is the secret, as documented
    for job in (first, second):
        client.delete(job["status_url"])


def test_job_ids_stay_out_of_the_logs(ray_session, client):
    """Issue 37.8: a job's id is all that guards it with keys off, and Ray's logs are readable on the node."""
    from pathlib import Path

    from app.jobs.model import job_tag

    job = client.post("/v1/jobs", files={"file": ("doc.pdf", numbered_pdf(2, "Logged"), "application/pdf")}).json()
    assert wait_finished(client, job["id"])["status"] == "succeeded"
    assert client.get(job["result_url"]).status_code == 200
    time.sleep(2)  # log lines are flushed
    from ray._private.worker import _global_node

    logs = Path(_global_node.get_session_dir_path()) / "logs"
    texts = {path: path.read_text(errors="replace") for path in logs.rglob("*")
             if path.is_file() and path.suffix in (".log", ".out", ".err")}
    assert any(job_tag(job["id"]) in text for text in texts.values())  # the runner did log the job, by its hash
    assert [path for path, text in texts.items() if job["id"] in text] == []
    client.delete(job["status_url"])
