"""GET /v1/jobs/{id}/events through the session's service, read with httpx-sse (the reference reader)."""

from __future__ import annotations

import json
import time

import httpx
from httpx_sse import connect_sse

from app.testkit.documents import numbered_pdf


def read_events(http: httpx.Client, job_id: str, last_id: str = None, stop_after: int = None) -> list:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    events = []
    with connect_sse(http, "GET", f"/v1/jobs/{job_id}/events", headers=headers) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for sse in source.iter_sse():
            events.append(sse)
            if sse.event == "end" or len(events) == stop_after:
                break
    return events


def test_a_20_page_job_streams_20_page_events_and_an_end_and_a_reconnect_repeats_none(service_url, client):
    job = client.post("/v1/jobs", files={"file": ("doc.pdf", numbered_pdf(20, "Streamed"), "application/pdf")}).json()
    with httpx.Client(base_url=service_url, timeout=120) as http:
        first = read_events(http, job["id"], stop_after=7)  # the client leaves after 7 events
        rest = read_events(http, job["id"], last_id=first[-1].id)
        again = read_events(http, job["id"], last_id="20")  # all seen: only the end
    events = first + rest
    pages = [e for e in events if e.event == "page"]
    assert [e.event for e in events] == ["page"] * 20 + ["end"]
    assert [int(e.id) for e in pages] == list(range(1, 21))
    numbers = [json.loads(e.data)["page_number"] for e in pages]
    assert sorted(numbers) == list(range(1, 21))  # each page once
    counts = [json.loads(e.data) for e in pages]
    assert [c["done"] for c in counts] == list(range(1, 21)) and all(c["total"] == 20 for c in counts)
    end = json.loads(events[-1].data)
    assert end["status"] == "succeeded" and end["pages"]["done"] == 20
    assert [e.event for e in again] == ["end"] and json.loads(again[0].data)["status"] == "succeeded"
    client.delete(job["status_url"])


def test_events_of_an_unknown_job_are_404_and_a_bad_last_event_id_400(client):
    missing = client.get("/v1/jobs/" + "0" * 32 + "/events")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "job_not_found"
    job = client.post("/v1/jobs", files={"file": ("doc.pdf", numbered_pdf(1), "application/pdf")}).json()
    bad = client.get(f"/v1/jobs/{job['id']}/events", headers={"Last-Event-ID": "x" * 20})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_last_event_id"
    client.delete(job["status_url"])


def test_a_burst_of_streams_from_one_client_holds_no_more_than_its_quota(service_url, client):
    """Issue 37.8: the quota was checked before the response and held once the stream ran, so a burst
    passed the check together and held past it. Sixteen at once from one client (quota 4): four stream."""
    import concurrent.futures
    import threading

    job = client.post("/v1/jobs", files={"file": ("doc.pdf", numbered_pdf(40, "Burst"), "application/pdf")}).json()
    opened, release = [], threading.Event()

    def open_stream() -> int:
        with httpx.Client(base_url=service_url, timeout=120) as http:
            with http.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
                opened.append(response.status_code)
                if response.status_code == 200:
                    release.wait(60)  # hold it open while the others try
                return response.status_code

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        calls = [pool.submit(open_stream) for _ in range(16)]
        deadline = time.monotonic() + 60
        while len(opened) < 16 and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        statuses = sorted(call.result() for call in calls)
    client.delete(f"/v1/jobs/{job['id']}")
    assert statuses.count(200) == 4 and statuses.count(429) == 12, statuses
