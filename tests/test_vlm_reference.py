"""The `vlm` engine against each model's own processor and `model.generate` (tests/vlm_reference.py):
the same inputs and the same tokens, batched and page by page, on every family, under every
transformers version the engine supports.

Random weights hide wrong inputs from every other test: batched-equals-single holds when
batched and single are wrong alike. The reference is what the model card documents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.tools.tiny_vlm import BUILDERS
from tests.vlm_reference import compare

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / ".venv" / "compat"  # made by `make install-test`
OTHER_SUPPORTED = ["5.17.0", "5.19.0"]  # the GPU machine's, and vLLM 0.32's ceiling (<5.20)


def assert_matches(report: dict, family: str) -> None:
    mismatched = sorted(key for key, same in report["inputs"].items() if not same)
    assert not mismatched, f"{family}: inputs differ from the processor's in {mismatched}"
    for mode in ("batched", "single"):
        engine, reference = report[mode]["engine"], report[mode]["reference"]
        assert engine == reference, f"{family} {mode}: engine tokens {engine} != reference {reference}"
    assert len({tuple(row) for row in report["single"]["reference"]}) > 1, "pages must not all read the same"


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_engine_inputs_and_tokens_equal_the_reference(tmp_path, family):
    assert_matches(compare(BUILDERS[family](tmp_path / family), family), family)


@pytest.mark.parametrize("version", OTHER_SUPPORTED)
def test_engine_equals_the_reference_under_other_supported_transformers(version):
    path = COMPAT / f"transformers-{version}"
    assert path.is_dir(), f"{path} is missing: `make install-test` installs it"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "tests.vlm_reference"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["transformers"] == version
    assert sorted(report["families"]) == sorted(BUILDERS)
    for family, result in report["families"].items():
        assert_matches(result, family)
