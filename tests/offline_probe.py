"""Run inside a network namespace with only loopback: start the service, OCR a page, print JSON.

Used by tests/test_offline.py; exits non-zero if anything fails.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.synthetic import png_bytes, render_text_page  # noqa: E402
from app.testkit.service import local_service  # noqa: E402


def outside_reachable() -> bool:
    try:
        socket.create_connection(("1.1.1.1", 443), timeout=2).close()
        return True
    except OSError:
        return False


def main() -> int:
    report = {"outside_reachable": outside_reachable()}
    with local_service({"ocr_replicas": 1}) as url:
        image = png_bytes(render_text_page(["Offline room 2026"]))
        response = httpx.post(f"{url}/v1/ocr", files={"file": ("o.png", image, "image/png")}, timeout=120)
        report.update(status=response.status_code, text=response.json().get("text", ""))
    print("PROBE " + json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
