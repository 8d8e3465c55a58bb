"""The 3-node cluster scenario (load/cluster_scale.py) end to end, in its own process.

It starts its own Ray cluster, so it runs before the shared session (marker own_cluster),
and as a subprocess so that nothing of that cluster outlives it in this interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.own_cluster


def test_three_node_cluster_scales_survives_node_loss_and_sheds_a_flood(tmp_path):
    report_path = tmp_path / "cluster.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "load" / "cluster_scale.py"), "--report", str(report_path),
         "--plot", str(tmp_path / "cluster.png"), "--short"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(report_path.read_text())["summary"]
    assert (tmp_path / "cluster.png").stat().st_size > 10_000

    assert summary["placement"]["nodes_with_ocr_replicas"] >= 2

    step = summary["step"]
    assert step["peak_ocr_replicas"] > 2  # above min_replicas
    assert step["seconds_to_scale_up"] is not None
    assert step["seconds_back_to_min_after_load"] is not None
    assert step["all"]["failed"] == 0 and step["all"]["ok"] == step["all"]["correct"] > 0

    loss = summary["node_loss"]
    assert loss["removed_node_had_ocr_replica"]
    assert loss["seconds_until_answering_again"] is not None
    assert loss["ok_after_removal"] > 0 and loss["ok_after_removal"] == loss["correct_after_removal"]

    flood = summary["flood"]
    assert flood["failed"] == 0 and flood["other_statuses"] == []
    assert flood["status_503"] > 0 and flood["ok"] > 0 and flood["every_200_correct"]
