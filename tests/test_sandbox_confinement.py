"""The decoder sandbox against hostile code inside it (issue 37.7): tests/sandbox_probe.py enters the
sandbox as app/sandbox/worker.py does and tries what an exploit would. Its parent is a stand-in for a
Preprocessor replica: hardened as replicas are, holding a secret in its environment, spawning the
probe the way the pool spawns decoders (app/sandbox/process.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = textwrap.dedent("""
    import json, os, sys
    from app.ops.replica import harden_process
    from app.sandbox.process import spawn_decoder
    harden_process()
    os.environ["RAY_AUTH_TOKEN"] = "replica-secret-token"
    probe = spawn_decoder([sys.executable, "-m", "tests.sandbox_probe", *sys.argv[1:]])
    out, _ = probe.communicate(timeout=120)
    sys.stdout.write(out.decode())
""")


def test_hostile_code_in_a_decoder_reads_no_secret_starts_nothing_and_reaches_no_one(tmp_path):
    ray_token = tmp_path / "home" / ".ray" / "auth_token"
    ray_token.parent.mkdir(parents=True)
    ray_token.write_text("cluster-token")
    keys = tmp_path / "api_keys"
    keys.write_text("tests:sha256:abc\n")
    real_token = Path.home() / ".ray" / "auth_token"
    secrets = [str(ray_token), str(keys), "/etc/passwd"] + ([str(real_token)] if real_token.exists() else [])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        answer = subprocess.run([sys.executable, "-c", STAND_IN, str(port), *secrets], capture_output=True,
                                cwd=ROOT, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        listener.close()
    assert answer.returncode == 0, answer.stderr.decode()[-2000:]
    report = json.loads(answer.stdout)
    print(json.dumps(report, indent=1))
    assert report["confinement"]["landlock_abi"] >= 4 and report["confinement"]["seccomp"] is True
    assert report["still_decodes"] == {"ok": True, "got": "(1, 1)"}
    for attack in ("parent_environ", "parent_maps", "fork", "exec", "subprocess", "tcp", "udp", "unix",
                   "write_tmp"):
        assert report[attack]["ok"] is False, (attack, report[attack])
    for path, outcome in report["secrets"].items():
        assert outcome["ok"] is False and "Permission" in outcome["error"], (path, outcome)
    if report["confinement"]["landlock_abi"] >= 6:
        assert report["signal_parent"]["ok"] is False
    assert not Path("/tmp/decoder-was-here").exists()


def test_the_service_reports_its_replica_closed_and_its_decoders_confined(client):
    """The wiring in the real graph: a Preprocessor replica is non-dumpable (its /proc/<pid>/environ and
    memory closed to its user's other processes), and its decoders run with every layer this kernel has."""
    sandbox = client.get("/v1/info").json()["sandbox"]
    assert sandbox["replica_dumpable"] is False
    assert sandbox["decoders"]["landlock_abi"] >= 4 and sandbox["decoders"]["seccomp"] is True
