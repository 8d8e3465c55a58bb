"""Node preflight against a fake NVML and fake system files: no driver needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from cluster import preflight

ROOT = Path(__file__).resolve().parent.parent


class FakeNVML:
    def __init__(self, gpus=("NVIDIA H100 80GB HBM3",) * 2, cuda=12040, driver="550.54.15"):
        self.gpus, self.cuda, self.driver = list(gpus), cuda, driver

    def nvmlSystemGetDriverVersion(self):
        return self.driver.encode()

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.cuda


def missing_library():
    raise OSError("NVML Shared Library Not Found")


def test_driver_and_cuda_checks_with_fake_nvml():
    check, nvml = preflight.check_driver(lambda: FakeNVML())
    assert check.status == "PASS" and "2 GPU(s)" in check.detail and "550.54.15" in check.detail
    assert preflight.check_cuda(nvml, "12.4").status == "PASS"
    old_driver = preflight.check_cuda(FakeNVML(cuda=12020), "12.4")
    assert old_driver.status == "FAIL" and "supports CUDA 12.2" in old_driver.detail
    assert preflight.check_driver(lambda: FakeNVML(gpus=()))[0].status == "FAIL"


def test_no_driver_is_said_plainly():
    check, nvml = preflight.check_driver(missing_library)
    assert (check.status, nvml) == ("FAIL", None)
    assert check.detail.startswith("no NVIDIA driver found")
    assert preflight.check_cuda(None, "12.4").status == "FAIL"


def test_nouveau_runtime_space_and_clock(tmp_path):
    modules = tmp_path / "modules"
    modules.write_text("nvidia_uvm 1 0 - Live\nnouveau 2 0 - Live\n")
    assert preflight.check_nouveau(modules).status == "FAIL"
    modules.write_text("nvidia 1 0 - Live\n")
    assert preflight.check_nouveau(modules).status == "PASS"

    daemon = tmp_path / "daemon.json"
    assert preflight.check_container_runtime(daemon).status == "FAIL"
    daemon.write_text(json.dumps({"runtimes": {"runc": {}}}))
    assert preflight.check_container_runtime(daemon).status == "FAIL"
    daemon.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    assert preflight.check_container_runtime(daemon).status == "PASS"

    assert preflight.check_space("free disk", str(tmp_path), 0.0).status == "PASS"
    assert preflight.check_space("free disk", str(tmp_path), 10**9).status == "FAIL"

    def answer(text):
        return lambda *a, **k: SimpleNamespace(stdout=text, stderr="", returncode=0)

    assert preflight.check_clock(answer("yes\n")).status == "PASS"
    assert preflight.check_clock(answer("no\n")).status == "FAIL"


def test_torch_check_reads_the_probe():
    def probe(out):
        return lambda *a, **k: SimpleNamespace(stdout=out, stderr="", returncode=0)

    assert preflight.check_torch_cuda("ocr:1.0", probe("True\n")).status == "PASS"
    assert preflight.check_torch_cuda(None, probe("False\n")).status == "FAIL"


def test_command_on_this_machine_says_no_driver_and_fails():
    result = subprocess.run([sys.executable, str(ROOT / "cluster" / "preflight.py")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert "nvidia driver" in result.stdout and "no NVIDIA driver found" in result.stdout
    assert "torch sees CUDA" in result.stdout


def test_a_secret_file_others_may_read_or_an_empty_one_fails_preflight(tmp_path):
    """Issue 37.4: the same check as the service's at start-up (app/ops/secrets.py), before a deploy."""
    import os

    good, open_, empty = tmp_path / "good", tmp_path / "open", tmp_path / "empty"
    for path, text, mode in ((good, "k" * 32, 0o600), (open_, "k" * 32, 0o644), (empty, "\n", 0o600)):
        path.write_text(text)
        os.chmod(path, mode)
    assert preflight.check_secret_files([str(good)]).status == preflight.PASS
    failed = preflight.check_secret_files([str(good), str(open_), str(empty), str(tmp_path / "missing")])
    assert failed.status == preflight.FAIL
    assert "chmod 600" in failed.detail and "empty" in failed.detail and "cannot be read" in failed.detail
    assert preflight.check_secret_files([]) is None
