"""Hostile input and faults against the real service over HTTP: the short versions of `make soak`.

The scenarios are load/soak_scenarios.py, the same functions the soak runs for longer.
The session's limits are tight (tests/conftest.py): decoders capped at 640 MiB and 5 s a page,
bodies due within 5 s.
"""

from __future__ import annotations

import pytest

from load import soak_scenarios as soak
from load.hostile import apng_frame_bomb, damaged_tiffs, fan_out_forms_pdf, self_drawing_form_pdf
from tests.conftest import OCR_REPLICAS, TEST_LIMITS

LIMIT_SLACK_S = 10


def test_fuzzer_gets_no_5xx_no_drops_and_json_errors(service_url):
    report = soak.fuzz(service_url, seed=20261203, count=120)
    print(report)
    assert report["requests"] == 120
    assert report["bad"] == [], report["bad"]
    assert report["replica_dips"] == []
    assert report["alive_after"]
    assert sum(n for status, n in report["by_status"].items() if status.startswith("4")) > 60  # it was hostile
    assert report["by_status"].get("200", 0) > 0  # and some mutations still decode and read


def test_bombs_get_their_4xx_within_the_limit_and_harm_nobody(service_url):
    cases = {"self-drawing-form-pdf": self_drawing_form_pdf(), "fan-out-forms-pdf": fan_out_forms_pdf(6, 10),
             "apng-2^31-frames": apng_frame_bomb(), **damaged_tiffs()}
    report = soak.bombs(service_url, cases, clients=2)
    print(report)
    bombs = report["bombs"]
    assert bombs["self-drawing-form-pdf"]["code"] == "document_too_complex"
    # Which limit stops the memory bomb first depends on the machine's load: the cap at 640 MiB or the
    # 5 s clock (CI saw both). tests/test_sandbox.py proves the cap alone with a clock it cannot reach.
    message = bombs["self-drawing-form-pdf"]["message"]
    assert "decode_memory_mb" in message or "page_render_timeout_s" in message, message
    assert bombs["fan-out-forms-pdf"]["code"] == "document_too_complex"
    assert "page_render_timeout_s" in bombs["fan-out-forms-pdf"]["message"]
    assert bombs["fan-out-forms-pdf"]["seconds"] < TEST_LIMITS["page_render_timeout_s"] + LIMIT_SLACK_S
    assert (bombs["apng-2^31-frames"]["status"], bombs["apng-2^31-frames"]["code"]) == (413, "too_many_pages")
    for name in damaged_tiffs():
        assert (bombs[name]["status"], bombs[name]["code"]) == (422, "corrupt_image"), bombs[name]
    for name, result in bombs.items():
        assert 400 <= result["status"] < 500 and result["seconds"] < TEST_LIMITS["page_render_timeout_s"] + LIMIT_SLACK_S
    assert report["clients"]["requests"] > 4
    assert report["clients"]["failed"] == 0, report["clients"]
    assert report["actors_replaced"] == [] and report["dead_actors_added"] == 0


def test_stalled_uploads_cannot_lock_out_a_good_request(service_url):
    report = soak.stalled_uploads(service_url, stalled=70, read_timeout_s=TEST_LIMITS["upload_read_timeout_s"])
    print(report)
    assert report["good_status"] == 200 and report["good_correct"]
    # Each stalled client is answered by the read deadline with a retryable 408, not left hanging.
    assert report["stalled_answers"] == {"408": 70}
    assert report["stalled_codes"] == {"upload_timeout": 70}


def test_kill_9_of_an_ocr_replica_under_load_fails_no_request(service_url):
    report = soak.kill_ocr_replica(service_url, clients=4, before_s=4, after_s=20, back_within_s=60)
    print(report)
    assert report["count_dipped"]  # the kill was real
    assert report["after_kill"]["requests"] > 10
    assert report["after_kill"]["failed"] == 0, report["after_kill"]
    # The controller must notice the death within its health-check period (3 s) and a poll or two. The
    # replacement is a cold start: 14.6 s alone here (5.5 s for the worker and its imports, 8.4 s for the
    # constructor and warm-up, from the controller's log), 30 s in a full run on this 2-core machine.
    # That is the machine's load, not a lost replica; it must come back within back_within_s.
    assert report["seconds_until_noticed"] is not None and report["seconds_until_noticed"] <= 3 + 5
    assert report["seconds_until_back"] is not None and report["seconds_until_back"] <= 60
    assert soak.running_replicas()["OCRModel"] == OCR_REPLICAS


@pytest.mark.parametrize("count", [300])
def test_rss_of_every_replica_is_flat_over_a_run(service_url, count):
    report = soak.rss_growth(service_url, requests=count, baseline_at=100, clients=4)
    print(report)
    assert report["load"]["failed"] == 0, report["load"]
    assert report["replicas_replaced"] == []
    for replica, figures in report["per_replica"].items():
        assert figures["growth_pct"] is not None and figures["growth_pct"] < soak.RSS_GROWTH_LIMIT_PCT, (replica, figures)


@pytest.mark.parametrize("request_id", [b"\xff\xfe", b"<script>alert(1)</script>", b"x" * 300])
def test_a_hostile_request_id_header_is_replaced_not_a_500(service_url, request_id):
    """Serve's proxy decodes X-Request-ID as UTF-8 and logs it verbatim; the proxy guard drops such values."""
    import socket
    from urllib.parse import urlsplit

    from app.testkit.raw_http import read_response

    parts = urlsplit(service_url)
    body = soak.good_png()
    head = (b"POST /v1/ocr HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nX-Request-ID: " + request_id +
            b"\r\nContent-Length: %d\r\n\r\n" % len(body))
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head + body)
        answer = read_response(sock)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"200", answer[:300]
    echoed = [line for line in rest.split(b"\r\n") if line.lower().startswith(b"x-request-id:")]
    assert echoed and request_id not in echoed[0]
