"""The service on this machine, for a test or a benchmark: Ray and the application on a free port."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Optional

from app.testkit.ports import free_port


@contextlib.contextmanager
def local_service(args: Optional[dict] = None, num_cpus: Optional[int] = None) -> Iterator[str]:
    """Start Ray and the application on a free port, as `make run` would; yield its URL."""
    import ray
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    port = free_port()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        started = time.perf_counter()
        deploy(build_app(args or {}), name="ocr", timeout_s=300)
        print(f"service up in {time.perf_counter() - started:.1f}s on port {port}", flush=True)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
