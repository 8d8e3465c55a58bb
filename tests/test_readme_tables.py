"""The measured figures of README.md and docs/*.md are the renders of the raw reports in load/results/, not typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from load import readme_tables

ROOT = Path(__file__).resolve().parent.parent


def test_every_rendered_block_in_the_readme_is_its_reports_render():
    done = subprocess.run([sys.executable, "load/readme_tables.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = [block for path in readme_tables.documents() for block in readme_tables.BLOCK.findall(path.read_text())]
    assert len(blocks) >= 7


def test_a_figure_edited_by_hand_inside_a_block_is_found():
    text = (ROOT / "docs" / "measurements.md").read_text()
    match = next(readme_tables.BLOCK.finditer(text))
    body = match["body"]
    digit = next(i for i, ch in enumerate(body) if ch.isdigit())
    edited = body[:digit] + str((int(body[digit]) + 1) % 10) + body[digit + 1:]
    tampered = text[:match.start("body")] + edited + text[match.end("body"):]
    _, changed = readme_tables.rendered(tampered)
    assert changed == [match["command"]]
