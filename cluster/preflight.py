"""Node preflight: is this machine ready to run the service's GPU image?

    python cluster/preflight.py [--cuda 12.4] [--image REGISTRY/ocr:1.2.0] [--min-shm-gib 8] [--min-disk-gib 100]
                                [--tls-dir /etc/ocr/tls] [--job-store rediss://ocr-redis:6390/0]

Prints one row per check and exits 1 if any check fails. Checks: the NVIDIA driver and its GPUs
(NVML), that the driver supports the image's CUDA version, that nouveau is not loaded, the NVIDIA
runtime in Docker's config, /dev/shm size, free disk, clock synchronisation, that torch sees
CUDA (inside --image when given, else in this Python), the fleet's TLS files (present, the key
private, the certificate signed by the CA and valid for 30 days more), and, with --job-store,
that the fleet's Redis answers over TLS with the password, AOF on and no eviction.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

PASS, FAIL, WARN = "PASS", "FAIL", "WARN"


@dataclass
class Check:
    name: str
    status: str
    detail: str


def load_nvml():
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def check_driver(nvml_loader: Callable = load_nvml) -> tuple[Check, Optional[object]]:
    try:
        nvml = nvml_loader()
    except Exception as exc:
        return Check("nvidia driver", FAIL, f"no NVIDIA driver found ({type(exc).__name__}: {exc})"), None
    version = _text(nvml.nvmlSystemGetDriverVersion())
    names = [_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(nvml.nvmlDeviceGetCount())]
    if not names:
        return Check("nvidia driver", FAIL, f"driver {version} but no GPUs"), nvml
    return Check("nvidia driver", PASS, f"driver {version}, {len(names)} GPU(s): {', '.join(sorted(set(names)))}"), nvml


def check_cuda(nvml, image_cuda: str) -> Check:
    if nvml is None:
        return Check("driver supports CUDA", FAIL, "no driver to ask")
    supported = nvml.nvmlSystemGetCudaDriverVersion_v2()  # e.g. 12040 for 12.4
    major, minor = supported // 1000, (supported % 1000) // 10
    wanted = tuple(int(part) for part in image_cuda.split(".")[:2])
    status = PASS if (major, minor) >= wanted else FAIL
    return Check("driver supports CUDA", status, f"driver supports CUDA {major}.{minor}, image needs {image_cuda}")


def check_nouveau(modules: Path = Path("/proc/modules")) -> Check:
    try:
        loaded = any(line.split(" ", 1)[0] == "nouveau" for line in modules.read_text().splitlines())
    except OSError as exc:
        return Check("nouveau not loaded", WARN, f"cannot read {modules}: {exc}")
    if loaded:
        return Check("nouveau not loaded", FAIL, "nouveau holds the GPU: blacklist it and reboot")
    return Check("nouveau not loaded", PASS, "not loaded")


def check_container_runtime(config: Path = Path("/etc/docker/daemon.json")) -> Check:
    try:
        runtimes = json.loads(config.read_text()).get("runtimes", {})
    except FileNotFoundError:
        return Check("nvidia container runtime", FAIL, f"{config} missing: run nvidia-ctk runtime configure")
    except (OSError, ValueError) as exc:
        return Check("nvidia container runtime", FAIL, f"{config} unreadable: {exc}")
    if "nvidia" not in runtimes:
        return Check("nvidia container runtime", FAIL, f"no 'nvidia' runtime in {config}")
    return Check("nvidia container runtime", PASS, f"nvidia runtime: {runtimes['nvidia'].get('path', '?')}")


def check_space(name: str, path: str, minimum_gib: float) -> Check:
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return Check(name, FAIL, f"{path}: {exc}")
    value = (usage.total if path == "/dev/shm" else usage.free) / 2**30
    what = "size" if path == "/dev/shm" else "free"
    status = PASS if value >= minimum_gib else FAIL
    return Check(name, status, f"{path} {what} {value:.1f} GiB (need {minimum_gib:g})")


def check_clock(run: Callable = subprocess.run) -> Check:
    try:
        result = run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("clock synchronised", WARN, f"cannot ask timedatectl ({exc}); check chrony/NTP by hand")
    answer = result.stdout.strip()
    if answer == "yes":
        return Check("clock synchronised", PASS, "NTP synchronised")
    if answer == "no":
        return Check("clock synchronised", FAIL, "NTP not synchronised: Ray and logs need one clock across nodes")
    reason = (result.stderr.strip().splitlines() or ["no output"])[0][:80]
    return Check("clock synchronised", WARN, f"timedatectl gave no answer ({reason})")


def check_torch_cuda(image: Optional[str], run: Callable = subprocess.run) -> Check:
    probe = "import torch; print(torch.cuda.is_available())"
    command = (["docker", "run", "--rm", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all", image, "python3", "-c", probe]
               if image else [sys.executable, "-c", probe])
    where = f"in {image}" if image else "in this Python"
    try:
        result = run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("torch sees CUDA", FAIL, f"{where}: {exc}")
    if result.stdout.strip().endswith("True"):
        return Check("torch sees CUDA", PASS, where)
    return Check("torch sees CUDA", FAIL, f"{where}: {(result.stdout + result.stderr).strip()[-160:] or 'False'}")


def check_tls_files(directory: str) -> Check:
    name, root = "TLS files", Path(directory)
    missing = [f for f in ("ca.crt", "node.crt", "node.key") if not (root / f).is_file()]
    if missing:
        return Check(name, FAIL, f"{directory}: no {', '.join(missing)} (cluster/make-tls.sh makes them)")
    mode = (root / "node.key").stat().st_mode & 0o777
    if mode & 0o077:
        return Check(name, FAIL, f"{root / 'node.key'} has mode {mode:o}: chmod 600 it")
    try:
        verified = subprocess.run(["openssl", "verify", "-CAfile", str(root / "ca.crt"), str(root / "node.crt")],
                                  capture_output=True, text=True, timeout=30)
        lasting = subprocess.run(["openssl", "x509", "-checkend", str(30 * 86400), "-noout", "-in",
                                  str(root / "node.crt")], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, WARN, f"cannot run openssl ({exc}); check the files by hand")
    if verified.returncode != 0:
        return Check(name, FAIL, f"node.crt is not signed by ca.crt: {(verified.stdout + verified.stderr).strip()[-120:]}")
    if lasting.returncode != 0:
        return Check(name, FAIL, "node.crt expires within 30 days: make new files and roll them out")
    return Check(name, PASS, f"{directory}: signed by its CA, valid 30 days more, key private")


def check_secret_files(paths: list[str]) -> Optional[Check]:
    """Secret files the service will read (callback signing keys): private, not empty. The replica refuses
    them at start-up otherwise (app/ops/secrets.py); better found here, before a deploy."""
    if not paths:
        return None
    try:
        from app.ops.secrets import secret_file_problem
    except ImportError as exc:
        return Check("secret files", WARN, f"run this inside the image to check them ({exc})")
    problems = [problem for problem in map(secret_file_problem, paths) if problem]
    if problems:
        return Check("secret files", FAIL, "; ".join(problems))
    return Check("secret files", PASS, f"{len(paths)} file(s): mode 0600 or stricter, not empty")


def check_job_store(url: Optional[str], ca_file: str, password_file: str) -> Optional[Check]:
    """The fleet's Redis as the service opens it (app/jobs/redis_store.py): TLS, password, AOF, no eviction."""
    if not url:
        return None
    name = "job store"
    try:
        from app.settings.jobs import Jobs
        from app.jobs.stores import open_store
    except ImportError as exc:
        return Check(name, WARN, f"run this inside the image to check {url} ({exc})")
    try:
        store = open_store(Jobs(store=url, redis_ca_file=ca_file, redis_password_file=password_file))
        store.ping()
        store.close()
    except Exception as exc:  # any refusal is the finding
        return Check(name, FAIL, f"{url}: {type(exc).__name__}: {str(exc)[:160]}")
    return Check(name, PASS, f"{url}: TLS, password, appendonly, noeviction")


def run_checks(options, nvml_loader: Callable = load_nvml) -> list[Check]:
    driver, nvml = check_driver(nvml_loader)
    store = check_job_store(options.job_store, f"{options.tls_dir}/ca.crt", options.redis_password_file)
    secrets = check_secret_files(getattr(options, "secret_file", None) or [])
    return [
        driver,
        check_cuda(nvml, options.cuda),
        check_nouveau(),
        check_container_runtime(),
        check_space("shared memory", "/dev/shm", options.min_shm_gib),
        check_space("free disk", options.disk_path, options.min_disk_gib),
        check_clock(),
        check_torch_cuda(options.image),
        check_tls_files(options.tls_dir),
    ] + [check for check in (store, secrets) if check]


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.name:<{width}}  {c.status:<4}  {c.detail}" for c in checks)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", default="12.4", help="CUDA version the image was built for")
    parser.add_argument("--image", help="run the torch check inside this image (docker run)")
    parser.add_argument("--min-shm-gib", type=float, default=8.0)
    parser.add_argument("--min-disk-gib", type=float, default=100.0)
    parser.add_argument("--disk-path", default="/var/lib/docker" if Path("/var/lib/docker").exists() else "/")
    parser.add_argument("--tls-dir", default="/etc/ocr/tls", help="the fleet's ca.crt, node.crt, node.key")
    parser.add_argument("--job-store", help="the fleet's Redis, as serve_config.yaml names it (rediss://HOST:6390/0)")
    parser.add_argument("--redis-password-file", default="/etc/ocr/secrets/redis_password")
    parser.add_argument("--secret-file", action="append", default=[],
                        help="a secret the service reads (jobs.callbacks.secret_file, receiver_secret_files); repeat")
    options = parser.parse_args(argv)
    checks = run_checks(options)
    print(table(checks))
    failed = [c.name for c in checks if c.status == FAIL]
    print(f"\n{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "\nall checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
