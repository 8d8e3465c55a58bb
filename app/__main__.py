"""`python -m app`: run the service on this machine (what `make run` does).

Starts a local Ray instance, deploys the graph with the default Settings (bundled
CPU engine) or with the args of a serve config file, waits until it is RUNNING or
failed, and serves until interrupted. On a cluster use `serve deploy serve_config.yaml`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import yaml

from app.http.proxy_guard import PROXY_GUARD_ENV
from app.loopback import is_loopback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Before Ray starts: the HTTP proxy it spawns reads this (app/http/proxy_guard.py).
os.environ.setdefault(*PROXY_GUARD_ENV)
# One machine: Ray's own node address is loopback, so its GCS, raylet and metrics port listen
# on 127.0.0.1 only (Ray binds the metrics port to every interface unless the node address is
# loopback, and ray.init turns 127.0.0.1 into the machine's address unless cluster mode is off).
# The API still listens on --host. Read when ray is first imported, so before that.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _args_from_config(path: str | None) -> dict:
    if not path:
        return {}
    with open(path) as handle:
        config = yaml.safe_load(handle)
    return config["applications"][0].get("args", {}) or {}




def _transport_refusal(options) -> str | None:
    """Why the API may not listen as asked: TLS half given or unreadable, or plaintext on the network."""
    if bool(options.tls_cert) != bool(options.tls_key):
        return "--tls-cert and --tls-key go together."
    for path in filter(None, (options.tls_cert, options.tls_key)):
        if not os.access(path, os.R_OK):
            return f"{path} cannot be read."
    if not options.tls_cert and not is_loopback(options.host) and not options.plain_http:
        return (f"--host {options.host} would carry API keys and documents over the network in clear. Give "
                "--tls-cert and --tls-key (cluster/make-tls.sh makes them), or --plain-http if TLS ends in front.")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--config", help="serve config file whose applications[0].args to use")
    parser.add_argument("--tls-cert", help="PEM certificate (chain) for https on --host; with --tls-key")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert (mode 0600)")
    parser.add_argument("--plain-http", action="store_true",
                        help="serve plain http on a non-loopback --host (TLS ends in front of this machine)")
    parser.add_argument("--engine", help="the engine (ppocr, vlm, vllm, ...), over the --config file's")
    parser.add_argument("--model-dir", help="the engine's local model directory, over the --config file's")
    parser.add_argument("--num-cpus", type=int, default=None, help="logical CPUs for the local Ray instance")
    parser.add_argument("--num-gpus", type=int, default=None, help="GPUs for the local Ray instance (default: detect)")
    parser.add_argument("--data-dir", default="data",
                        help="where jobs are kept (jobs.store sqlite:///DATA_DIR/jobs.sqlite3) unless the config names a store")
    parser.add_argument("--metrics-port", type=int, default=8080,
                        help="Ray's metrics export port: Prometheus scrapes http://HOST:PORT/metrics")
    parser.add_argument("--dashboard-port", type=int, default=8265,
                        help="the Ray dashboard, on 127.0.0.1 only (what `serve status` talks to)")
    parser.add_argument("--temp-dir", default=None,
                        help="Ray's temp dir (default /tmp/ray): its logs, and the file Prometheus discovers nodes by")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--stop-timeout", type=float, default=3.0,
                        help="seconds in-flight requests get to finish on Ctrl-C before Ray is stopped")
    options = parser.parse_args(argv)
    args = _args_from_config(options.config)
    args.update({key: value for key, value in (("engine", options.engine), ("model_dir", options.model_dir))
                 if value is not None})
    if not is_loopback(options.host) and not (args.get("auth") or {}).get("api_keys_file"):
        print(f"error: --host {options.host} would open the OCR API to the network without API keys. "
              "Set auth.api_keys_file in the --config file (python -m app.http.auth add FILE NAME makes a key), "
              "or listen on 127.0.0.1.", file=sys.stderr)
        return 2

    refusal = _transport_refusal(options)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2

    args = with_local_job_store(args, options.data_dir)

    import ray
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    from app.ops.secrets import private_ray_token

    private_ray_token()  # before Ray writes it world-readable
    # address="local": always a Ray instance of its own, even where another one runs on this machine.
    # The dashboard stays on loopback: `serve status` and `serve deploy` work here, nobody else reaches it.
    ray.init(address="local", num_cpus=options.num_cpus, num_gpus=options.num_gpus, include_dashboard=True,
             dashboard_host="127.0.0.1", dashboard_port=options.dashboard_port,
             _metrics_export_port=options.metrics_port, _temp_dir=options.temp_dir)
    tls = {"ssl_certfile": options.tls_cert, "ssl_keyfile": options.tls_key} if options.tls_cert else {}
    serve.start(http_options={"host": options.host, "port": options.port, **tls})
    try:
        deploy(build_app(args), name="ocr", timeout_s=options.start_timeout)
    except Exception as exc:
        print(f"error: the service did not start: {exc}", file=sys.stderr)
        serve.shutdown()
        ray.shutdown()
        return 1
    scheme = "https" if options.tls_cert else "http"
    print(f"OCR service ready at {scheme}://{options.host}:{options.port}  (POST /v1/ocr, GET /readyz); Ctrl-C stops it\n"
          f"  metrics: http://127.0.0.1:{options.metrics_port}/metrics (Prometheus; cluster/observability/)\n"
          f"  dashboard: http://127.0.0.1:{options.dashboard_port} (token auth: "
          f"RAY_AUTH_MODE=token serve status -a http://127.0.0.1:{options.dashboard_port})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    started = time.monotonic()
    stop_quickly(options.stop_timeout)
    print(f"stopped in {time.monotonic() - started:.1f}s", flush=True)
    return 0


def with_local_job_store(args: dict, data_dir: str) -> dict:
    """Jobs on by default on one machine: a SQLite file under the data directory (made here, mode 0700)."""
    jobs = dict(args.get("jobs") or {})
    if jobs.get("store"):
        return args
    path = os.path.abspath(data_dir)
    os.makedirs(path, mode=0o700, exist_ok=True)
    jobs["store"] = f"sqlite:///{os.path.join(path, 'jobs.sqlite3')}"
    return {**args, "jobs": jobs}


def stop_quickly(drain_s: float) -> None:
    """Give Serve `drain_s` to finish in-flight requests, then take the local Ray instance down.

    serve.shutdown() alone waits for every replica's graceful shutdown and then 30 s more
    for the controller. This runner owns its Ray instance, so it waits `drain_s` for the
    same graceful shutdown, in this thread (a serve.shutdown still running in another one
    while ray.shutdown() goes on makes Ray's core worker end the process with status 1,
    before anything below has run), then stops Ray and ends whatever of that instance
    outlived ray.shutdown (app/serve/local_ray.py says why there is any).
    """
    import ray

    from app.serve.local_ray import end_leftovers, processes_of_this_instance

    drain_serve(drain_s)
    node_id = ray.get_runtime_context().get_node_id()
    before = processes_of_this_instance(os.getpid(), node_id)
    ray.shutdown()
    end_leftovers(os.getpid(), node_id, before)


def drain_serve(timeout_s: float) -> None:
    """Serve's graceful shutdown with our bound on it: what serve.shutdown() does, with
    its controller wait (30 s there) cut to `timeout_s`. Serve's client is private API."""
    from ray.serve.context import _disconnect, _get_global_client

    try:
        client = _get_global_client()
    except Exception:  # no Serve here, or Ray's API moved: ray.shutdown() still stops it all
        return
    try:
        client.shutdown(timeout_s=timeout_s)
    finally:
        _disconnect()


if __name__ == "__main__":
    sys.exit(main())
