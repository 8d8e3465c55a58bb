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
