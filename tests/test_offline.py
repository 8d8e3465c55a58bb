"""Zero network at run time: the service starts and reads a page in a namespace with only loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.own_cluster  # starts its own Ray, inside the namespace


def test_service_runs_and_reads_with_outbound_network_cut_off():
    assert shutil.which("unshare"), "util-linux unshare is needed to cut the network"
    script = f"ip link set lo up && exec {sys.executable} {ROOT / 'tests' / 'offline_probe.py'}"
    result = subprocess.run(["unshare", "--net", "sh", "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=600, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                                                          "RAY_USAGE_STATS_ENABLED": "0"})
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(lines[-1][len("PROBE "):])
    assert report["outside_reachable"] is False  # the namespace really is cut off
    assert report["status"] == 200
    assert "offline room 2026" in report["text"].lower()
