"""/v1/jobs shared by tenants who do not play fair, over real HTTP against a real Serve application.

The session's keyed application (tests/conftest.py, `keyed_app`: the real graph under /tenants, with
API keys for several clients and its SQLite job store on a real tmpfs, mounted there; CI runs as
root), so that "the disk is full" is the kernel's ENOSPC and not a simulation.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from app.testkit.documents import numbered_pdf
from app.testkit.jobs import wait_finished

APP = "tenants"


@pytest.fixture(scope="module")
def tenants(keyed_app):
    """(base URL, {client name: key}, the store's directory): the session's keyed application (conftest)."""
    return keyed_app


def as_client(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def submit(url: str, key: str, document: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/jobs", headers=as_client(key), timeout=120,
                      files={"file": ("doc.pdf", document, "application/pdf")})


def runner_stats() -> dict:
    from ray import serve

    return serve.get_deployment_handle("JobRunner", app_name=APP).info.remote().result()["stats"]


def test_a_small_job_of_one_tenant_passes_another_tenants_backlog_and_the_quota_names_itself(tenants):
    url, keys, _ = tenants
    backlog = numbered_pdf(300, "Backlog")
    queued = []
    for _ in range(6):
        accepted = submit(url, keys["tenant-a"], backlog)
        assert accepted.status_code == 202, accepted.text
        queued.append(accepted.json()["id"])
    seventh = submit(url, keys["tenant-a"], backlog)
    assert seventh.status_code == 429, seventh.text
    error = seventh.json()["error"]
    assert error["code"] == "quota_exceeded" and error["retryable"] is True and error["request_id"]
    assert "jobs.quotas.max_queued_jobs=6" in error["message"] and int(seventh.headers["retry-after"]) > 0

    started = time.monotonic()
    small = submit(url, keys["tenant-b"], numbered_pdf(1, "Urgent"))
    assert small.status_code == 202, small.text
    with httpx.Client(base_url=url, headers=as_client(keys["tenant-b"]), timeout=120) as tenant_b:
        status = wait_finished(tenant_b, small.json()["id"], timeout_s=60)
        seconds = time.monotonic() - started
        assert status["status"] == "succeeded", status
        assert "Urgent page 1" in tenant_b.get(status["result_url"]).json()["text"]
    with httpx.Client(base_url=url, headers=as_client(keys["tenant-a"]), timeout=120) as tenant_a:
        pages_done = [tenant_a.get(f"/v1/jobs/{job_id}").json()["pages"]["done"] for job_id in queued]
        print({"tenant_b_seconds": round(seconds, 1), "tenant_a_pages_done": pages_done})
        assert sum(pages_done) < 6 * 300  # the backlog was still there: B went past it, not after it
        for job_id in queued:
            assert tenant_a.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert runner_stats()["turns"] > 0


def test_a_jobs_document_is_read_once_for_all_its_turns(tenants):
    url, keys, _ = tenants
    before = runner_stats()
    with httpx.Client(base_url=url, headers=as_client(keys["tenant-b"]), timeout=120) as tenant_b:
        job = submit(url, keys["tenant-b"], numbered_pdf(24, "Turns")).json()
        status = wait_finished(tenant_b, job["id"], timeout_s=240)
        assert status["status"] == "succeeded" and status["pages"]["done"] == 24
        pages = tenant_b.get(status["result_url"]).json()["pages"]
        assert [page["page_number"] for page in pages] == list(range(1, 25)) and "Turns page 24" in pages[-1]["text"]
    after = runner_stats()
    print({"before": before, "after": after})
    assert after["turns"] - before["turns"] >= 2  # 24 pages in turns of 8
    assert after["documents_read"] - before["documents_read"] == 1  # from the store once, not once a turn


def test_a_job_past_its_decode_budget_stops_rendering_and_fails(tenants):
    url, keys, _ = tenants
    with httpx.Client(base_url=url, headers=as_client(keys["thrifty"]), timeout=120) as thrifty:
        started = time.monotonic()
        job = submit(url, keys["thrifty"], numbered_pdf(300, "Costly")).json()
        status = wait_finished(thrifty, job["id"], timeout_s=240)
        seconds = time.monotonic() - started
        result = thrifty.get(status["result_url"]).json()
    over = [page for page in result["pages"] if page.get("error", {}).get("code") == "decode_budget_exceeded"]
    read = [page for page in result["pages"] if "text" in page]
    print({"seconds": round(seconds, 1), "read": len(read), "over_budget": len(over), "status": status["status"]})
    assert status["status"] == "failed" and status["error"]["code"] == "too_many_failed_pages"
    assert len(read) + len(over) == 300 and 1 <= len(read) < 150  # 0.2 s of decoding, not 300 pages of it
    assert "quotas.max_decode_s=0.2 s" in over[0]["error"]["message"]


def test_a_full_disk_is_507_without_a_re_ocr_loop_and_jobs_go_on_once_space_is_freed(tenants, client, invoice_png):
    url, keys, directory = tenants
    document = numbered_pdf(300, "Filler")
    accepted, refused = [], None
    for _ in range(40):  # each submit is 3 MB; the store's disk is 64 MB with a 16 MB floor
        answer = submit(url, keys["filler"], document)
        if answer.status_code != 202:
            refused = answer
            break
        accepted.append(answer.json()["id"])
    assert refused is not None and refused.status_code == 507, refused and refused.text
    assert refused.json()["error"]["code"] == "insufficient_storage" and refused.headers["retry-after"]
    assert "jobs.min_free_bytes" in refused.json()["error"]["message"] and len(accepted) >= 5

    # Then something else on that disk takes the rest: the runner can no longer write results.
    with open(f"{directory}/other-tenant-of-the-disk", "wb") as filler:
        with pytest.raises(OSError):
            while True:
                filler.write(b"\0" * (1 << 20))
                filler.flush()
    time.sleep(4)  # a result fails to land, and the runner pauses
    before = runner_stats()
    time.sleep(10)
    after = runner_stats()
    print({"before": before, "after": after})
    assert after["store_full_pauses"] >= 1
    assert after["pages"] - before["pages"] <= 8  # at most one turn's pages, not OCR round after round
    sync = client.post(f"{url}/v1/ocr", headers=as_client(keys["tenant-b"]),
                       files={"file": ("invoice.png", invoice_png, "image/png")})
    assert sync.status_code == 200 and "INVOICE 4711" in sync.json()["text"]  # /v1/ocr needs no store

    os.remove(f"{directory}/other-tenant-of-the-disk")
    with httpx.Client(base_url=url, headers=as_client(keys["filler"]), timeout=120) as filler_client:
        for job_id in accepted:
            assert filler_client.delete(f"/v1/jobs/{job_id}").status_code == 204
        again = submit(url, keys["filler"], numbered_pdf(2, "Again"))
        assert again.status_code == 202, again.text
        status = wait_finished(filler_client, again.json()["id"], timeout_s=120)
        assert status["status"] == "succeeded" and status["pages"]["done"] == 2
