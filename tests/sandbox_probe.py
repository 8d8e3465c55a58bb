"""Hostile code inside a decoder (issue 37.7), run by tests/test_sandbox_confinement.py.

`python -m tests.sandbox_probe SECRET_FILE...`: enters the sandbox exactly as a decoder does
(app/sandbox/worker.py `enter_sandbox`), then tries what an exploit in PDFium would: read the
parent's environment and memory map, read each SECRET_FILE, fork, exec, start a thread's worth of
process, connect out by TCP, UDP and a Unix socket, signal its parent. Prints what happened, as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def attempt(what):
    try:
        outcome = what()
        return {"ok": True, "got": str(outcome)[:80]}
    except BaseException as exc:  # noqa: BLE001 - every refusal is the finding
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:160]}


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def fork_child():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return os.waitpid(pid, 0)


def connect_tcp(port: int):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def send_udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        return udp.sendto(b"x", ("127.0.0.1", 9))


def main(argv: list[str]) -> int:
    from app.sandbox.worker import enter_sandbox

    tcp_port, secrets = int(argv[1]), argv[2:]
    confinement = enter_sandbox(512)
    parent = os.getppid()
    report = {
        "confinement": confinement,
        "parent_environ": attempt(lambda: read(f"/proc/{parent}/environ")),
        "parent_maps": attempt(lambda: read(f"/proc/{parent}/maps")),
        "secrets": {path: attempt(lambda path=path: read(path)) for path in secrets},
        "fork": attempt(fork_child),
        "exec": attempt(lambda: os.execv("/bin/true", ["/bin/true"])),
        "subprocess": attempt(lambda: __import__("subprocess").run(["/bin/true"], check=True)),
        "tcp": attempt(lambda: connect_tcp(tcp_port)),
        "udp": attempt(send_udp),
        "unix": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "signal_parent": attempt(lambda: os.kill(parent, 0)),
        "write_tmp": attempt(lambda: open("/tmp/decoder-was-here", "wb").write(b"x")),
        "still_decodes": attempt(decode_a_page),
    }
    sys.stdout.write(json.dumps(report))
    return 0


def decode_a_page():
    """What a decoder is for still works under all of it: a PDF's page rendered, a PNG decoded."""
    from app.config import DecodeLimits
    from app.page_size import InputBudget
    from app.sandbox.documents import iter_pages
    from app.synthetic import pdf_bytes, png_bytes, render_text_page

    page = render_text_page(["Confined"])
    pdf = list(iter_pages(pdf_bytes([page], 100), "application/pdf", None, DecodeLimits(), InputBudget(2000, 4_000_000)))
    png = list(iter_pages(png_bytes(page), "image/png", None, DecodeLimits(), InputBudget(2000, 4_000_000)))
    return (len(pdf), len(png))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
