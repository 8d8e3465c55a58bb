"""Offline install: the wheelhouse script, then the Dockerfile's install steps in a fresh venv.

No Docker engine runs here, so the image's two `pip install --no-index` steps are replayed in
a new virtual environment, which must then start the service and read a page, with the
repository nowhere on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from app.testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.own_cluster  # the fresh install starts its own Ray

RUN_SERVICE = r"""
import json, sys
import httpx, ray
from ray import serve
from app.serve.builder import build_app
from app.serve.deploy import deploy
from app.synthetic import png_bytes, render_text_page
port = int(sys.argv[1])  # chosen by the test, outside the ephemeral range Ray's processes bind from
ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
serve.start(http_options={"host": "127.0.0.1", "port": port})
deploy(build_app({"ocr_replicas": 1}), timeout_s=240)
page = png_bytes(render_text_page(["Wheelhouse install 77"]))
response = httpx.post(f"http://127.0.0.1:{port}/v1/ocr", files={"file": ("w.png", page, "image/png")}, timeout=120)
import app
print("RESULT " + json.dumps({"status": response.status_code, "text": response.json()["text"], "app": app.__file__,
                             "notes": response.json()["pages"][0]["notes"]}))
serve.shutdown(); ray.shutdown()
"""


def pip_dockerfile_steps(python: Path, wheelhouse: Path) -> None:
    """The Dockerfile's dependency and service stages, verbatim apart from the paths."""
    base = [str(python), "-m", "pip", "install", "--no-cache-dir", "--no-index"]
    subprocess.run(base + ["--find-links", str(wheelhouse), "-r", str(ROOT / "cluster" / "requirements-cpu.txt")],
                   check=True, capture_output=True, timeout=900)
    [app_wheel] = wheelhouse.glob("offline_ocr_serve-*.whl")
    subprocess.run(base + ["--no-deps", str(app_wheel)], check=True, capture_output=True, timeout=300)
    subprocess.run([str(python), "-m", "app.tools.structure_models", *map(str, (wheelhouse / "structure").glob("*.whl"))],
                   check=True, capture_output=True, timeout=300)


def test_wheelhouse_installs_offline_and_runs_the_service(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    started = time.monotonic()
    download = subprocess.run(["bash", str(ROOT / "cluster" / "wheelhouse.sh"), str(wheelhouse), "--set", "cpu"],
                              env={**os.environ, "PIP": f"{sys.executable} -m pip"}, capture_output=True, text=True,
                              timeout=1200)
    assert download.returncode == 0, download.stderr[-3000:]
    assert (wheelhouse / "SHA256SUMS").is_file()
    downloaded = time.monotonic()

    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip_dockerfile_steps(python, wheelhouse)
    installed = time.monotonic()

    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([str(python), "-c", RUN_SERVICE, str(free_port())], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(lines[-1][len("RESULT "):])
    assert report["status"] == 200 and "wheelhouse install 77" in report["text"].lower()
    assert not any("structure" in note for note in report["notes"]), report["notes"]  # the models were taken out
    assert str(tmp_path / "venv") in report["app"]  # the installed wheel, not this checkout
    [app_wheel] = wheelhouse.glob("offline_ocr_serve-*.whl")
    shipped = zipfile.ZipFile(app_wheel).namelist()
    assert "app/ui/static/ui.js" in shipped and "app/structure/__init__.py" in shipped
    assert not [name for name in shipped if name.startswith("app/testkit/")]  # test helpers stay out
    print(f"wheelhouse {downloaded - started:.0f}s, offline install {installed - downloaded:.0f}s, "
          f"service answered {time.monotonic() - installed:.0f}s later")
