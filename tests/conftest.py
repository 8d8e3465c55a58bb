"""One Ray instance and one Serve application for the whole session.

Ray gets one logical GPU, so the OCR replicas' `num_gpus: 0.25` is placed for real
(four of them share it) while the engine itself runs on the CPU. Tests marked
`own_cluster` start a separate `ray start` cluster; they run first, before this
session's Ray exists, so the two never compete for the machine.
"""

from __future__ import annotations

import os
import tempfile

import httpx
import pytest

from app.http.proxy_guard import PROXY_GUARD_ENV
from app.testkit.ports import free_port  # noqa: F401 (used by tests)
from app.synthetic import pdf_bytes, png_bytes, render_text_page  # noqa: F401 (pdf_bytes, png_bytes: used by tests)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault(*PROXY_GUARD_ENV)
# Weights-verified markers of this run only (app/ops/weights.py), inherited by every Ray worker.
os.environ.setdefault("OCR_WEIGHTS_MARKER_DIR", tempfile.mkdtemp(prefix="ocr-weights-markers-"))

OCR_REPLICAS = 4
TEST_LIMITS = {
    "max_upload_bytes": 3 * 1024 * 1024,
    "max_pages": 5,
    "max_image_pixels": 25_000_000,
    "pdf_dpi": 100,
    # Tight sandbox limits, so that the hostile-input tests hit them in seconds.
    "decode_memory_mb": 640,
    "page_render_timeout_s": 5,
    "upload_read_timeout_s": 5,
}
# Callbacks go to a receiver the test starts on this port, signed with this key (tests/test_job_callbacks.py).
CALLBACK_PORT = free_port()
CALLBACK_SECRET = os.urandom(32).hex().encode()
_secret_dir = tempfile.mkdtemp(prefix="ocr-callback-")
CALLBACK_SECRET_FILE = os.path.join(_secret_dir, "callback.key")
with open(os.open(CALLBACK_SECRET_FILE, os.O_CREAT | os.O_WRONLY, 0o600), "wb") as _handle:
    _handle.write(CALLBACK_SECRET + b"\n")
TEST_ARGS = {
    "engine": "ppocr",
    "engine_threads": 1,
    "ocr_replicas": OCR_REPLICAS,
    "ocr_num_cpus": 0.5,
    "ocr_num_gpus": 0.25,
    "limits": TEST_LIMITS,
    # A generous wait so that concurrent pages reliably meet in one batch.
    "batching": {"max_batch_size": 8, "batch_wait_timeout_s": 0.3, "max_concurrent_batches": 1},
    # Lines only unless a request asks (structure=auto): the timing and fault tests keep the load they were
    # sized for on 2 cores (with layout on every page a killed OCR replica came back in 19 s, not 15);
    # the structure tests ask for it, and python -m app (the observability tests) serves the default, auto.
    "structure": {"mode": "off"},
    # Jobs in a SQLite file of this run; short leases so that a takeover after kill -9 takes seconds.
    "jobs": {"store": f"sqlite:///{tempfile.mkdtemp(prefix='ocr-jobs-')}/jobs.sqlite3", "lease_s": 3,
             "max_pages": 40, "max_inflight_pages": 4, "upload_idle_timeout_s": 5,
             "callbacks": {"allowed_hosts": [f"127.0.0.1:{CALLBACK_PORT}"], "secret_file": CALLBACK_SECRET_FILE,
                           "backoff_s": 0.5, "timeout_s": 5}},
}


def pytest_collection_modifyitems(config, items):
    """Each test in one tier, from what it starts (`pytest -m unit` runs the quick tier alone), and the
    tests that start a Ray of their own first, before this session's exists."""
    for item in items:
        if item.get_closest_marker("own_cluster"):
            item.add_marker(pytest.mark.system)
        elif "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.service)
        else:
            item.add_marker(pytest.mark.unit)
    items.sort(key=lambda item: 0 if item.get_closest_marker("own_cluster") else 1)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(address="local", num_cpus=8, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def service_url(ray_session) -> str:
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    deploy(build_app(TEST_ARGS), name="ocr", timeout_s=240)
    return f"http://127.0.0.1:{port}"


KEYED_PREFIX = "/tenants"
KEYED_STORE_BYTES = 64 * 1024 * 1024
KEYED_FREE_FLOOR = 16 * 1024 * 1024


@pytest.fixture(scope="session")
def keyed_app(ray_session, service_url, tmp_path_factory):
    """A second application with API keys, its jobs in SQLite on a real 64 MB tmpfs: (base URL, {client name:
    key}, the store's directory). One deploy for the key tests (tests/test_auth.py, key "tests") and the
    tenants' (tests/test_jobs_tenants.py: quotas of 6 queued jobs, a "filler" without, a "thrifty" decoder)."""
    from ray import serve

    from app.http.auth import add_key
    from app.serve.builder import build_app
    from app.serve.deploy import deploy
    from app.testkit.tmpfs import small_tmpfs

    keys_file = tmp_path_factory.mktemp("tenant-keys") / "api_keys"
    keys = {name: add_key(keys_file, name) for name in ("tests", "tenant-a", "tenant-b", "filler", "thrifty")}
    with small_tmpfs(KEYED_STORE_BYTES) as directory:
        args = {"engine": "ppocr", "engine_threads": 1, "ocr_replicas": 1, "ocr_num_cpus": 0.5, "ocr_num_gpus": 0,
                "limits": TEST_LIMITS, "auth": {"api_keys_file": str(keys_file)},
                "jobs": {"store": f"sqlite:///{directory}/jobs.sqlite3", "max_pages": 300, "lease_s": 3,
                         "turn_pages": 8, "max_inflight_pages": 4, "min_free_bytes": KEYED_FREE_FLOOR,
                         "quotas": {"max_queued_jobs": 6},
                         "client_quotas": {"filler": {"max_queued_jobs": 1000, "max_queued_pages": 10**6},
                                           "thrifty": {"max_decode_s": 0.2}}}}
        deploy(build_app(args), name="tenants", route_prefix=KEYED_PREFIX, timeout_s=240)
        try:
            yield service_url + KEYED_PREFIX, keys, directory
        finally:
            serve.delete("tenants")


@pytest.fixture(scope="session")
def client(service_url):
    with httpx.Client(base_url=service_url, timeout=120) as http:
        yield http


@pytest.fixture(scope="session")
def invoice_png() -> bytes:
    return png_bytes(render_text_page(["INVOICE 4711", "Total amount 57.80 EUR", "Thank you"]))


@pytest.fixture(scope="session")
def three_page_pdf() -> bytes:
    pages = [render_text_page([f"Page {word} of three", f"Section {word.upper()}"]) for word in ("one", "two", "three")]
    return pdf_bytes(pages)
