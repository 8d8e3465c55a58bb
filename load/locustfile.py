"""Locust user for the real flow: upload a devset image or PDF, check the result.

    locust -f load/locustfile.py --headless -u 8 -r 2 -t 60s --host http://127.0.0.1:8000

Files come from ../shared/eval/devset (override with OCR_LOAD_FILES=dir); 503 answers are
counted as failures named "503 overloaded" so that shedding is visible apart from errors.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from locust import HttpUser, between, task

DEVSET = Path(os.environ.get("OCR_LOAD_FILES", Path(__file__).resolve().parents[2] / "shared" / "eval" / "devset"))
TYPES = {".jpg": "image/jpeg", ".png": "image/png", ".tif": "image/tiff", ".pdf": "application/pdf"}
FILES = [(p.name, p.read_bytes(), TYPES[p.suffix.lower()]) for p in sorted(DEVSET.rglob("*")) if p.suffix.lower() in TYPES]


class OCRUser(HttpUser):
    wait_time = between(0.1, 0.5)

    @task
    def ocr(self) -> None:
        name, data, content_type = random.choice(FILES)
        with self.client.post("/v1/ocr", files={"file": (name, data, content_type)}, name="/v1/ocr",
                              catch_response=True, timeout=300) as response:
            if response.status_code == 503:
                response.failure("503 overloaded")
            elif response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
            else:
                body = response.json()
                pages = body.get("pages") or []
                if not pages or any(p["index"] != i for i, p in enumerate(pages)):
                    response.failure("pages missing or out of order")
                else:
                    response.success()
