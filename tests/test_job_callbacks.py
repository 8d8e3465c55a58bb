"""Callbacks when a job ends, through the session's service to a local receiver that checks the signature
with the standard library's hmac (not the service's code)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.testkit.documents import numbered_pdf
from app.testkit.jobs import wait_finished
from tests.conftest import CALLBACK_PORT, CALLBACK_SECRET


class Receiver(ThreadingHTTPServer):
    """Answers each POST with the next of `answers` (the last one repeated), keeping what arrived."""

    def __init__(self, answers):
        self.answers, self.deliveries = list(answers), []
        super().__init__(("127.0.0.1", CALLBACK_PORT), Handler)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        code = server.answers.pop(0) if len(server.answers) > 1 else server.answers[0]
        server.deliveries.append({"headers": dict(self.headers), "body": body, "answered": code, "at": time.time()})
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = Receiver([500, 204])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def signed_by_the_secret(headers: dict, body: bytes) -> bool:
    fields = dict(part.split("=", 1) for part in headers["X-OCR-Signature"].split(","))
    expected = hmac.new(CALLBACK_SECRET, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"]) and abs(time.time() - int(fields["t"])) < 120


def test_a_callback_answered_500_is_retried_signed_and_its_delivery_shown(client, receiver):
    url = f"http://127.0.0.1:{CALLBACK_PORT}/ocr-done"
    submitted = client.post("/v1/jobs", params={"callback_url": url},
                            files={"file": ("doc.pdf", numbered_pdf(2, "Called"), "application/pdf")}).json()
    assert submitted["callback"] == {"url": url, "status": "waiting", "attempts": 0}
    assert wait_finished(client, submitted["id"])["status"] == "succeeded"
    deadline = time.monotonic() + 30
    while len(receiver.deliveries) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    first, second = receiver.deliveries[:2]
    assert (first["answered"], second["answered"]) == (500, 204) and second["at"] - first["at"] >= 0.4
    for delivery in (first, second):
        assert signed_by_the_secret(delivery["headers"], delivery["body"])
        body = json.loads(delivery["body"])
        assert body["id"] == submitted["id"] and body["status"] == "succeeded" and body["pages"]["done"] == 2
        assert delivery["headers"]["X-OCR-Job"] == submitted["id"]
    tampered = second["body"].replace(b"succeeded", b"failed")
    assert not signed_by_the_secret(second["headers"], tampered)
    deadline = time.monotonic() + 10
    while (status := client.get(submitted["status_url"]).json())["callback"]["status"] != "delivered":
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status["callback"]["attempts"] == 2 and status["callback"]["last_status"] == 204
    time.sleep(1.5)
    assert len(receiver.deliveries) == 2  # delivered once it got its 2xx, not again
    client.delete(submitted["status_url"])


@pytest.mark.parametrize("url", ["http://127.0.0.2:9/hook", f"http://127.0.0.1:{CALLBACK_PORT + 1}/hook",
                                 f"http://user:pw@127.0.0.1:{CALLBACK_PORT}/hook", "file:///etc/passwd"])
def test_a_callback_outside_the_allowlist_is_refused_at_submit(client, url):
    refused = client.post("/v1/jobs", params={"callback_url": url},
                          files={"file": ("doc.pdf", numbered_pdf(1), "application/pdf")})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] in ("callback_not_allowed", "invalid_callback_url")
