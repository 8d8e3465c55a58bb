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


def test_client_exits_non_zero_when_a_file_fails(service_url, tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7 not really")
    (tmp_path / "good.png").write_bytes(png_bytes(render_text_page(["Fine page"])))
    code, screen = run_under_pty([str(tmp_path / "broken.pdf"), str(tmp_path / "good.png"), "--out",
                                  str(tmp_path / "out"), "--url", service_url, "--no-progress"])
    assert code == 1 and "corrupt_pdf" in screen and "succeeded" in screen, screen
    assert not (tmp_path / "out" / "broken.json").exists() and (tmp_path / "out" / "good.json").exists()
