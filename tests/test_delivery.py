"""Delivery tooling: bundle and verify-and-load round trips with a stub docker, and the linters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

STUB_DOCKER = """#!/usr/bin/env bash
# A stand-in docker: save prints the image file, load stores stdin, tag/push are logged.
set -euo pipefail
state="$DOCKER_STUB_STATE"
case "$1" in
  save) cat "$state/image.tar" ;;
  load) cat > "$state/loaded.tar"; echo "Loaded image: $(cat "$state/name")" ;;
  tag|push) echo "$*" >> "$state/log" ;;
  *) echo "stub docker: $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def docker_stub(tmp_path):
    state = tmp_path / "docker"
    state.mkdir()
    (state / "image.tar").write_bytes(os.urandom(3 * 1024 * 1024 + 123))  # spans several 1 MB chunks
    (state / "name").write_text("ocr:1.2.0")
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir()
    (stub_bin / "docker").write_text(STUB_DOCKER)
    (stub_bin / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub_bin}:{os.environ['PATH']}", "DOCKER_STUB_STATE": str(state)}
    return state, env


def run(script: str, *args, env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "cluster" / script), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


def bundle(tmp_path, env) -> Path:
    out = tmp_path / "bundle"
    result = run("bundle.sh", "ocr:1.2.0", out, "--chunk-mb", "1", env=env)
    assert result.returncode == 0, result.stderr
    return out


def test_bundle_round_trip_loads_the_same_bytes_and_pushes_a_versioned_tag(tmp_path, docker_stub):
    state, env = docker_stub
    out = bundle(tmp_path, env)
    parts = sorted(out.glob("ocr-1.2.0.tar.gz.part-*"))
    assert len(parts) >= 2 and all(p.stat().st_size <= 1024 * 1024 for p in parts)
    result = run("verify-and-load.sh", out, "registry.local:5000", env=env)
    assert result.returncode == 0, result.stderr
    assert (state / "loaded.tar").read_bytes() == (state / "image.tar").read_bytes()
    log = (state / "log").read_text().splitlines()
    assert log == ["tag ocr:1.2.0 registry.local:5000/ocr:1.2.0", "push registry.local:5000/ocr:1.2.0"]


def test_a_flipped_byte_is_caught_before_loading(tmp_path, docker_stub):
    state, env = docker_stub
    out = bundle(tmp_path, env)
    part = sorted(out.glob("*.part-*"))[1]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    result = run("verify-and-load.sh", out, "registry.local:5000", env=env)
    assert result.returncode != 0 and part.name in result.stdout + result.stderr
    assert not (state / "loaded.tar").exists() and not (state / "log").exists()


def test_a_missing_chunk_is_caught_before_loading(tmp_path, docker_stub):
    state, env = docker_stub
    out = bundle(tmp_path, env)
    missing = sorted(out.glob("*.part-*"))[-1]
    missing.unlink()
    result = run("verify-and-load.sh", out, "registry.local:5000", env=env)
    assert result.returncode != 0 and missing.name in result.stdout + result.stderr
    assert not (state / "loaded.tar").exists()


@pytest.mark.parametrize("image", ["ocr:latest", "ocr", "registry:5000/ocr"])
def test_latest_or_untagged_images_are_refused(tmp_path, docker_stub, image):
    _, env = docker_stub
    result = run("bundle.sh", image, tmp_path / "b", env=env)
    assert result.returncode == 2 and "version tag" in result.stderr


def test_dockerfile_passes_hadolint():
    result = subprocess.run([str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_pass_shellcheck():
    scripts = sorted(ROOT.glob("cluster/**/*.sh")) + [ROOT / ".ci" / "run"]
    result = subprocess.run([str(BIN / "shellcheck"), *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
