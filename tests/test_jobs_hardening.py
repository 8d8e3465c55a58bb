"""The job routes under hostile input and beside load, against the session's service: short versions of
`make soak`'s job scenarios. Apart from tests/test_hardening.py so that its replica-kill timing runs
as before, not straight after jobs."""

from __future__ import annotations

from load import soak_scenarios as soak


def test_job_lifecycles_beside_ocr_load_lose_nothing(service_url):
    from app.testkit.documents import numbered_pdf

    report = soak.jobs_lifecycle(service_url, numbered_pdf(3, "Cycle"), "Cycle page 3", clients=2, seconds=10)
    print(report)
    assert report["cycles"].get("ok", 0) >= 3 and report["failures"] == [], report
    assert report["ocr_load"]["failed"] == 0 and report["ocr_load"]["requests"] > 5


def test_fuzzer_on_the_job_routes_gets_no_5xx_no_drops_and_loses_no_accepted_job(service_url):
    report = soak.fuzz(service_url, seed=20261206, count=60, jobs=True)
    print({key: report[key] for key in ("job_route_requests", "job_route_by_status", "jobs_accepted",
                                        "jobs_unfinished", "by_code")})
    assert report["bad"] == [], report["bad"]
    assert report["replica_dips"] == [] and report["alive_after"]
    assert report["job_route_requests"] >= 15 and report["jobs_accepted"] >= 3  # it reached the routes and the runner
    assert report["jobs_unfinished"] == []  # every job accepted ended, none vanished
    assert sum(n for status, n in report["job_route_by_status"].items() if status.startswith("4")) >= 10


def test_forty_searchable_pdf_calls_on_one_kept_job_leave_a_good_ocr_request_answered(service_url, client,
                                                                                      invoice_png):
    """Issue 37.5: each call loaded the kept document and held a decoder; forty took every decoder."""
    import concurrent.futures
    import time
    from collections import Counter

    import httpx

    from app.testkit.documents import numbered_pdf
    from app.testkit.jobs import wait_finished
    from tests.error_walk import check_error

    submitted = client.post("/v1/jobs", params={"keep_document": "true"},
                            files={"file": ("kept.pdf", numbered_pdf(40, "Kept", dpi=150), "application/pdf")}).json()
    assert wait_finished(client, submitted["id"], timeout_s=240)["status"] == "succeeded"

    def pdf() -> httpx.Response:
        with httpx.Client(base_url=service_url, timeout=300) as own:
            return own.get(submitted["result_url"], params={"format": "pdf"})

    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        calls = [pool.submit(pdf) for _ in range(40)]
        time.sleep(0.5)
        started = time.monotonic()
        good = client.post("/v1/ocr", params={"orientation": "off"}, files={"file": ("i.png", invoice_png, "image/png")})
        took = time.monotonic() - started
        answers = [call.result() for call in calls]
    assert good.status_code == 200 and "INVOICE" in good.json()["text"]
    assert took < 15, took
    statuses = Counter(answer.status_code for answer in answers)
    assert set(statuses) <= {200, 429, 503} and statuses[200] >= 1, statuses
    assert len({answer.content for answer in answers if answer.status_code == 200}) == 1  # one PDF, kept
    for answer in answers:
        if answer.status_code != 200:
            check_error(answer, answer.status_code, "quota_exceeded" if answer.status_code == 429 else "overloaded")
            assert answer.json()["error"]["retryable"] and "retry-after" in answer.headers
    again = client.get(submitted["result_url"], params={"format": "pdf"})
    assert again.status_code == 200 and again.content == answers[[a.status_code for a in answers].index(200)].content
    client.delete(submitted["status_url"])


def test_fuzzer_on_the_new_doors_gets_no_5xx_and_every_replica_stays_up(service_url):
    """Issue 37.9, short: chat completions (malformed, nested, huge, bad data: URLs, knobs at their edges),
    and every accepted job's result in every format and its event stream."""
    report = soak.fuzz(service_url, seed=20261207, count=80, jobs=True, doors=True)
    print({key: report[key] for key in ("chat_requests", "chat_by_status", "results_and_streams_by_status",
                                        "by_status", "seconds")})
    assert report["bad"] == [], report["bad"]
    assert report["replica_dips"] == [] and report["alive_after"]
    assert report["chat_requests"] >= 12 and report["jobs_unfinished"] == []
    doors = report["results_and_streams_by_status"]
    assert any(key.startswith("result?format=pdf 200") for key in doors), doors  # a kept document was made searchable
    assert any(key.startswith("events 200") for key in doors), doors
    assert any(status.startswith("4") for status in report["chat_by_status"])
    assert report["chat_by_status"].get("200", 0) >= 1  # good requests among them were read
