"""The command-line client on a folder of five files, under a pseudo-terminal, against the session's service."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import termios
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import pdf_bytes, png_bytes, render_text_page

ROOT = Path(__file__).resolve().parent.parent


def run_under_pty(args: list[str], timeout_s: float = 300) -> tuple[int, str]:
    """Run the client with a terminal on stdout and stderr (as a user's shell), capturing what it drew."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a 160-column terminal
    process = subprocess.Popen([sys.executable, "-m", "app.client", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower, env={**os.environ, "COLUMNS": "120"})
    os.close(follower)
    output = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the client exited and closed its end
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return process.wait(timeout=30), output.decode(errors="replace")


def test_client_on_a_folder_then_a_second_run_skips_everything(service_url, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    expected = {}
    for n in range(1, 4):
        lines = [[f"Archive {n} sheet {p}", f"Folio {n * 100 + p}"] for p in range(1, 4)]
        (inputs / f"archive-{n}.pdf").write_bytes(pdf_bytes([render_text_page(page) for page in lines]))
        expected[f"archive-{n}"] = [f"Folio {n * 100 + p}" for p in range(1, 4)]
    for n in range(4, 6):
        (inputs / f"scan-{n}.png").write_bytes(png_bytes(render_text_page([f"Receipt {n}", f"Amount {n}9.50"])))
        expected[f"scan-{n}"] = [f"Amount {n}9.50"]
    out = tmp_path / "out"
    code, screen = run_under_pty([str(inputs), "--out", str(out), "--url", service_url, "--concurrency", "3"])
    assert code == 0, screen
    assert "11/11" in screen and "pages" in screen, screen  # tqdm's bar reached every page of every file
    for stem, needles in expected.items():
        body = json.loads((out / f"{stem}.json").read_text())
        assert body["status"] == "succeeded"
        markdown = (out / f"{stem}.md").read_text()
        for page, needle in zip(body["pages"], needles if len(needles) > 1 else needles * 1):
            assert needle in page["text"], (stem, page["text"])
        assert all(needle in markdown for needle in needles)
    assert screen.count("succeeded") == 5
    code, again = run_under_pty([str(inputs), "--out", str(out), "--url", service_url])
    assert code == 0 and "5 already done, 0 to OCR" in again and again.count("skipped") == 5, again
    # Another report under an old name is new work, not "already done".
    (inputs / "scan-4.png").write_bytes(png_bytes(render_text_page(["Receipt 4", "Amount 77.25"])))
    code, changed = run_under_pty([str(inputs), "--out", str(out), "--url", service_url, "--no-progress"])
    assert code == 0 and "4 already done, 1 to OCR" in changed, changed
    assert "77.25" in json.loads((out / "scan-4.json").read_text())["text"]


def test_client_exits_non_zero_when_a_file_fails(service_url, tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7 not really")
    (tmp_path / "good.png").write_bytes(png_bytes(render_text_page(["Fine page"])))
    code, screen = run_under_pty([str(tmp_path / "broken.pdf"), str(tmp_path / "good.png"), "--out",
                                  str(tmp_path / "out"), "--url", service_url, "--no-progress"])
    assert code == 1 and "corrupt_pdf" in screen and "succeeded" in screen, screen
    assert not (tmp_path / "out" / "broken.json").exists() and (tmp_path / "out" / "good.json").exists()


def test_the_key_is_not_sent_in_clear_to_another_machine(tmp_path, capsys):
    import pytest

    from app.client import check_transport, main

    check_transport("http://127.0.0.1:8000", "key", insecure=False)  # this machine
    check_transport("http://localhost:8000", "key", insecure=False)
    check_transport("https://ocr.internal:8443", "key", insecure=False)
    check_transport("http://ocr.internal:8000", None, insecure=False)  # no key, nothing to leak
    check_transport("http://10.0.0.5:8000", "key", insecure=True)  # told so
    with pytest.raises(SystemExit, match="in clear to another machine"):
        check_transport("http://10.0.0.5:8000", "key", insecure=False)
    (tmp_path / "a.png").write_bytes(b"x")
    with pytest.raises(SystemExit, match="in clear"):
        main([str(tmp_path / "a.png"), "--out", str(tmp_path / "out"), "--url", "http://ocr.internal:8000",
              "--api-key", "k"])


def test_job_urls_off_the_servers_origin_are_not_followed_and_server_text_is_defanged(tmp_path):
    import httpx
    import pytest

    from app.client import Client, Progress, _error_text, process_file

    seen = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        return httpx.Response(202, json={"id": "j", "status": "queued", "pages": {"total": 1, "done": 0, "failed": 0},
                                         "status_url": "http://collector.example/v1/jobs/j",
                                         "result_url": "//collector.example/v1/jobs/j/result"})

    client = Client("http://127.0.0.1:8000", "secret-key", poll_s=0.01)
    client._http = httpx.Client(base_url="http://127.0.0.1:8000", headers={"Authorization": "Bearer secret-key"},
                                transport=httpx.MockTransport(server))
    (tmp_path / "doc.png").write_bytes(b"png")
    with pytest.raises(ValueError, match="off the --url's origin"):
        process_file(client, tmp_path / "doc.png", "doc", tmp_path, None, Progress(disable=True))
    assert seen == [("127.0.0.1", "Bearer secret-key")]  # the submit only; nothing went to collector.example

    hostile = httpx.Response(400, json={"error": {"code": "bad\x1b]0;owned\x07", "message": "x\x1b[2J\x1b[31mred"}})
    text = _error_text(hostile)
    assert "\x1b" not in text and "\x07" not in text and "red" in text


def test_a_changed_file_under_an_old_name_is_not_taken_for_done(tmp_path):
    from app.client import is_complete, source_of

    (tmp_path / "report.pdf").write_bytes(b"first contents")
    source = source_of(tmp_path / "report.pdf", None)
    (tmp_path / "report.md").write_text("text")
    (tmp_path / "report.json").write_text(json.dumps({"status": "succeeded", "source": source}))
    assert is_complete(tmp_path, "report", source_of(tmp_path / "report.pdf", None))
    assert not is_complete(tmp_path, "report", source_of(tmp_path / "report.pdf", "1-2"))  # another selection
    (tmp_path / "report.pdf").write_bytes(b"other contents, same name")
    assert not is_complete(tmp_path, "report", source_of(tmp_path / "report.pdf", None))


def test_client_writes_every_asked_format_and_each_is_what_the_service_gives(service_url, tmp_path):
    import io

    from app.formats.validate import alto_schema
    from app.testkit.poppler import pdftotext

    (tmp_path / "deed.pdf").write_bytes(pdf_bytes([render_text_page([f"Deed {n}", f"Parcel {n}17"])
                                                   for n in (1, 2)]))
    out = tmp_path / "out"
    code, screen = run_under_pty([str(tmp_path / "deed.pdf"), "--out", str(out), "--url", service_url,
                                  "--format", "pdf,hocr", "--format", "alto"])
    assert code == 0 and "2/2" in screen, screen
    body = json.loads((out / "deed.json").read_text())
    assert "Parcel 117" in pdftotext((out / "deed.pdf").read_bytes()) and "Parcel 217" in body["text"]
    assert b"ocrx_word" in (out / "deed.hocr").read_bytes() and not (out / "deed.md").exists()
    alto_schema().validate(io.BytesIO((out / "deed.alto.xml").read_bytes()))
    code, again = run_under_pty([str(tmp_path / "deed.pdf"), "--out", str(out), "--url", service_url,
                                 "--format", "pdf,hocr,alto", "--no-progress"])
    assert code == 0 and "1 already done" in again, again
    code, more = run_under_pty([str(tmp_path / "deed.pdf"), "--out", str(out), "--url", service_url,
                                "--format", "markdown", "--no-progress"])
    assert code == 0 and "0 already done" in more and (out / "deed.md").exists(), more


def test_the_progress_follows_the_jobs_events_and_polls_only_without_them():
    import httpx

    from app.client import Client, follow

    def stream(*events) -> bytes:
        return b"".join(f"id: {i}\nevent: {name}\ndata: {json.dumps(data)}\n\n".encode()
                        for i, (name, data) in enumerate(events, 1))

    finished = {"id": "j", "status": "succeeded", "pages": {"total": 2, "done": 2, "failed": 0},
                "status_url": "/v1/jobs/j", "result_url": "/v1/jobs/j/result"}
    asked = []

    def service(with_events: bool):
        def answer(request: httpx.Request) -> httpx.Response:
            asked.append(request.url.path)
            if request.url.path.endswith("/events"):
                if not with_events:
                    return httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}})
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream(
                    ("page", {"page_number": 2, "status": "done", "done": 1, "failed": 0, "total": 2}),
                    ("page", {"page_number": 1, "status": "done", "done": 2, "failed": 0, "total": 2}),
                    ("end", finished)))
            return httpx.Response(200, json=finished)
        return answer

    running = {**finished, "status": "running", "pages": {"total": 2, "done": 0, "failed": 0}}
    for with_events, expected in ((True, ["/v1/jobs/j/events"]), (False, ["/v1/jobs/j/events", "/v1/jobs/j"])):
        asked.clear()
        client = Client("http://127.0.0.1:8000", None, poll_s=0.01)
        client._http = httpx.Client(base_url="http://127.0.0.1:8000", transport=httpx.MockTransport(service(with_events)))
        advanced = []
        progress = type("Recorder", (), {"advance": lambda self, pages: advanced.append(pages)})()
        assert follow(client, dict(running), progress)["status"] == "succeeded"
        assert asked == expected and sum(advanced) == 2, (asked, advanced)
