"""Deploying from Python with a deadline: `serve.run` alone waits forever on a graph that cannot be placed."""

from __future__ import annotations

import time

from ray import serve
from ray.serve import Application


def wait_until_running(app_name: str, timeout_s: float) -> None:
    """Return when the application is RUNNING; raise with Serve's own message if it failed or stalled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app = serve.status().applications.get(app_name)
        if app is not None and app.status == "RUNNING":
            return
        if app is not None and app.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"application {app_name} {app.status}: {app.message}")
        time.sleep(0.5)
    app = serve.status().applications.get(app_name)
    detail = {name: d.message for name, d in app.deployments.items() if d.message} if app else {}
    raise TimeoutError(f"application {app_name} not RUNNING after {timeout_s:.0f}s: {detail}")


def deploy(app: Application, name: str = "ocr", route_prefix: str = "/", timeout_s: float = 300.0) -> None:
    serve._run(app, name=name, route_prefix=route_prefix, _blocking=False)
    wait_until_running(name, timeout_s)
