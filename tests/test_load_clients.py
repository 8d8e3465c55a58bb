"""load/clients.py, the benchmarks' one client harness, against a real HTTP server: answers in order,
503s and failures told apart, error codes read, and never more clients in flight than asked."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from load.clients import Upload, closed_loop, closed_loop_for, tally


class Handler(BaseHTTPRequestHandler):
    """The body names the answer: ok, busy (503 JSON), plain (503 text), bad (422 JSON), drop."""

    inflight = 0
    most_inflight = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server's name
        with Handler.lock:
            Handler.inflight += 1
            Handler.most_inflight = max(Handler.most_inflight, Handler.inflight)
        body = self.rfile.read(int(self.headers["content-length"]))
        kind = body.split(b"kind=")[-1].split(b";")[0].decode() if b"kind=" in body else "ok"
        time.sleep(0.05)
        # Out of flight before the client can see the answer: counted after the write, a client that
        # has its answer may already be sending its next request while this thread still counts the last.
        with Handler.lock:
            Handler.inflight -= 1
        if kind == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status, payload, content_type = {
            "ok": (200, json.dumps({"text": "read", "size": len(body)}), "application/json"),
            "busy": (503, json.dumps({"error": {"code": "overloaded"}}), "application/json"),
            "plain": (503, "no healthy upstream", "text/plain"),
            "bad": (422, json.dumps({"error": {"code": "unprocessable_document"}}), "application/json"),
        }[kind]
        data = payload.encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Handler.most_inflight = 0
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def upload(kind: str, multipart: bool = True) -> Upload:
    return Upload(f"kind={kind};".encode(), "image/png", multipart=multipart)


def test_answers_come_back_in_upload_order_with_503s_and_failures_apart(server):
    kinds = ["ok", "busy", "ok", "plain", "bad", "drop", "ok", "ok"]
    answers, seconds = closed_loop(server, [upload(kind) for kind in kinds], concurrency=3, timeout_s=10)
    assert [answer.status for answer in answers] == [200, 503, 200, 503, 422, 0, 200, 200]
    assert [answer.code for answer in answers] == [None, "overloaded", None, "non-json", "unprocessable_document",
                                                   None, None, None]
    assert answers[0].body["text"] == "read" and answers[5].error  # the transport error is kept
    assert tally(answers) == {"ok": 4, "503": 2, "failed": 2}
    assert 0 < seconds < 10 and Handler.most_inflight <= 3


def test_a_closed_loop_never_has_more_requests_in_flight_than_clients(server):
    closed_loop(server, [upload("ok")] * 12, concurrency=4, timeout_s=10)
    assert Handler.most_inflight == 4  # 12 requests of 50 ms, 4 at a time: all four clients were busy at once
    Handler.most_inflight = 0
    answers, elapsed = closed_loop_for(server, upload("ok", multipart=False), clients=2, seconds=0.5)
    assert Handler.most_inflight == 2 and tally(answers)["ok"] == len(answers) >= 6
    assert answers[0].body["size"] == len(b"kind=ok;")  # the raw body, not a multipart form
    assert elapsed >= 0.5
