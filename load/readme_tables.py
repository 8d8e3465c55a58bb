"""The measured figures of README.md and docs/*.md, rendered from the raw JSON reports in load/results/,
never typed.

    python load/readme_tables.py           # rewrite every rendered block of README.md and docs/*.md
    python load/readme_tables.py --check   # exit 1 where a block differs from its report's render

A rendered block is the output of one benchmark's `--render` of one report,
between these two lines (COMMAND is run from the repository's root, `python` being this
interpreter):

    <!-- rendered: python load/cpu_cost.py --render load/results/cpu_cost.json -->
    <!-- end rendered -->

`make test` runs the check (tests/test_readme_tables.py), so a figure edited by hand, or a
report measured again without rendering, fails the suite.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def documents() -> list[Path]:
    """Where rendered blocks may stand: the README and the docs."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- rendered: (?P<command>[^\n]*?) -->\n)(?P<body>.*?)(<!-- end rendered -->)", re.S)


def render(command: str) -> str:
    argv = shlex.split(command)
    if argv[:1] != ["python"] or len(argv) < 2 or not argv[1].startswith("load/") or not (
            {"--render", "--markdown"} & set(argv)):
        raise ValueError(f"not a benchmark's --render (or soak.py's --markdown): {command}")
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")
    return done.stdout.strip() + "\n"


def rendered(text: str) -> tuple[str, list[str]]:
    """README text with every block rendered anew, and the commands whose block changed."""
    changed: list[str] = []

    def replace(match: re.Match) -> str:
        body = render(match["command"])
        if body != match["body"]:
            changed.append(match["command"])
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text), changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    options = parser.parse_args()
    blocks, changed = 0, []
    for path in documents():
        text = path.read_text()
        new_text, stale = rendered(text)
        blocks += len(BLOCK.findall(text))
        changed += [f"{path.relative_to(ROOT)}: {command}" for command in stale]
        if not options.check and stale:
            path.write_text(new_text)
    if options.check:
        for command in changed:
            print(f"stale: {command}")
        print(f"{blocks} rendered blocks, {len(changed)} stale")
        return 1 if changed else 0
    print(f"{blocks} rendered blocks, {len(changed)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
