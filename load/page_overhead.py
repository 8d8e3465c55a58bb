"""Time outside the engine per page at concurrency 1, on the devset's pages, with the stages named.

    python load/page_overhead.py [--rounds 5] [--arms default,structure_off,orientation_off,both_off]
    python load/page_overhead.py --before REF [--rounds 3]
    python load/page_overhead.py --render load/results/page_overhead.json

One service as `make run` starts it (the bundled engine, the shipped settings), one client, one
request at a time: each devset page (kind `page`) is sent once per arm per round, the arms' order
alternating by page and by round, after one warm-up pass of every page through every arm.
With `--before REF` the arms are two trees of the code instead, REF's `app` (taken out with
`git archive`) and the working tree's, each round of each in a fresh process and Ray instance, their
order alternating by round; both are sent the shipped request (`default`).

For each answer: the client's wall time, the engine's time for the page's batch (`engine_batch`),
and what the page's own timings name (decode, resize_encode, orientation, ocr_decode, queue_wait,
postprocess, and the structure model's stages where it ran). Outside the engine = wall - engine_batch;
what no stage names = outside - the named stages on the page's path (the structure model reads beside
the engine, so only what of it outlasts the engine is on the path). Each round's figure is the median
over its pages; the table gives the median over rounds with their min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "--code" in sys.argv:  # an arm's tree: its `app` before this repository's (and the cwd, for Ray's workers)
    sys.path.insert(0, sys.argv[sys.argv.index("--code") + 1])

from load.clients import Upload, post  # noqa: E402
from load.common import (add_report_options, commit, load_devset, machine, measure_or_render, spread_cell,  # noqa: E402
                         summary)

DEVSET = Path(__file__).resolve().parent.parent.parent / "shared" / "eval" / "devset" / "manifest.jsonl"
TARGET_MS = 150.0  # issue 39: at most 150 ms outside the engine per page at c=1
ARMS = {"default": {}, "structure_off": {"structure": "off"}, "orientation_off": {"orientation": "off"},
        "both_off": {"structure": "off", "orientation": "off"}}
SERIAL_STAGES = ("decode", "render", "resize_encode", "orientation", "ocr_decode", "queue_wait", "postprocess")


def page_figures(answer) -> dict:
    """The figures of one answered page."""
    [page] = answer.body["pages"]
    timings = page["timings_ms"]
    wall_ms = answer.seconds * 1000
    engine_ms = timings.get("engine_batch", 0.0)
    named = {stage: timings[stage] for stage in SERIAL_STAGES if stage in timings}
    structure_ms = sum(ms for stage, ms in timings.items() if stage.startswith("structure_"))
    # The structure model reads while the OCR replica waits and reads: only what of it is longer is on the path.
    structure_on_path = max(0.0, structure_ms - timings.get("queue_wait", 0.0) - engine_ms)
    outside = wall_ms - engine_ms
    return {"wall_ms": wall_ms, "engine_ms": engine_ms, "outside_ms": outside, "named_ms": named,
            "structure_ms": structure_ms, "structure_on_path_ms": structure_on_path,
            "unnamed_ms": outside - sum(named.values()) - structure_on_path}


def measure(options) -> dict:
    import httpx

    from app.testkit.service import local_service

    samples = [sample for sample in load_devset(Path(options.devset)) if sample.kind == "page"]
    uploads = {sample.path.name: sample for sample in samples}
    arms = {name: ARMS[name] for name in options.arms.split(",")}
    rounds: list[dict] = []
    failures: dict = {arm: {} for arm in arms}
    with local_service() as url, httpx.Client(base_url=url, timeout=120) as client:
        def send(sample, arm):
            return post(client, Upload(sample.path.read_bytes(), sample.content_type, sample.path.name,
                                       params=arms[arm] or None))

        for sample in samples:  # warm-up: every page through every arm, each must answer 200
            for arm in arms:
                if not (answer := send(sample, arm)).ok:
                    raise RuntimeError(f"warm-up: {sample.path.name} {arm}: {answer.status} {answer.error}")
        for round_ in range(options.rounds):
            measured: dict = {arm: {} for arm in arms}
            for index, sample in enumerate(samples):
                order = list(arms) if (round_ + index) % 2 == 0 else list(reversed(arms))
                for arm in order:
                    answer = send(sample, arm)
                    if answer.ok:
                        measured[arm][sample.path.name] = page_figures(answer)
                    else:
                        failures[arm][str(answer.status)] = failures[arm].get(str(answer.status), 0) + 1
                    time.sleep(0.05)  # concurrency 1: the last request's tail is over
            rounds.append(measured)
            print(f"round {round_ + 1}: " + ", ".join(
                f"{arm} outside {statistics.median(p['outside_ms'] for p in m.values()):.1f} ms"
                for arm, m in measured.items()), flush=True)
    import app

    return {"benchmark": "page_overhead", "commit": commit(), "machine": machine(), "app": str(Path(app.__file__).parent),
            "settings": {"rounds": options.rounds, "arms": arms, "pages": sorted(uploads), "concurrency": 1,
                         "service": "make run's (app.testkit.service.local_service, shipped settings)"},
            "failures": failures, "arms": {arm: arm_summary(rounds, arm) for arm in arms}, "rounds": rounds}


def measure_before_after(options) -> dict:
    """REF's tree against the working tree: one round of each at a time, in fresh processes."""
    from load.cpu_cost import tree_at

    with tempfile.TemporaryDirectory(prefix="page_overhead_") as scratch:
        trees = {"before": tree_at(options.before, Path(scratch) / "before"), "after": ROOT}
        rounds: list[dict] = []
        failures: dict = {"before": {}, "after": {}}
        for round_ in range(options.rounds):
            measured = {}
            for arm in (["before", "after"] if round_ % 2 == 0 else ["after", "before"]):
                report_file = Path(scratch) / f"{arm}-{round_}.json"
                subprocess.run([sys.executable, __file__, "--rounds", "1", "--arms", "default", "--devset", options.devset,
                                "--code", str(trees[arm]), "--report", str(report_file)],
                               cwd=trees[arm], env={**os.environ, "PYTHONPATH": str(trees[arm])}, timeout=1800)
                one = json.loads(report_file.read_text())
                if Path(one["app"]).resolve() != (trees[arm] / "app").resolve():
                    raise RuntimeError(f"the {arm} arm imported {one['app']}")
                measured[arm] = one["rounds"][0]["default"]
                for status, count in one["failures"]["default"].items():
                    failures[arm][status] = failures[arm].get(status, 0) + count
            rounds.append(measured)
    before_commit = subprocess.run(["git", "rev-parse", "--short", options.before], cwd=ROOT, capture_output=True,
                                   text=True, check=True).stdout.strip()
    return {"benchmark": "page_overhead", "commit": commit(), "before": options.before, "before_commit": before_commit,
            "machine": machine(),
            "settings": {"rounds": options.rounds, "arms": {"before": {}, "after": {}}, "pages": one["settings"]["pages"],
                         "concurrency": 1, "service": one["settings"]["service"]},
            "failures": failures, "arms": {arm: arm_summary(rounds, arm) for arm in ("before", "after")}, "rounds": rounds}


def arm_summary(rounds: list[dict], arm: str) -> dict:
    def over_rounds(figure) -> dict:
        return summary([statistics.median(figure(page) for page in r[arm].values()) for r in rounds])

    stages = sorted({stage for r in rounds for page in r[arm].values() for stage in page["named_ms"]})
    return {"outside_ms": over_rounds(lambda p: p["outside_ms"]), "wall_ms": over_rounds(lambda p: p["wall_ms"]),
            "engine_ms": over_rounds(lambda p: p["engine_ms"]), "unnamed_ms": over_rounds(lambda p: p["unnamed_ms"]),
            "structure_on_path_ms": over_rounds(lambda p: p["structure_on_path_ms"]),
            "stages_ms": {stage: over_rounds(lambda p, s=stage: p["named_ms"].get(s, 0.0)) for stage in stages}}


def render(report: dict) -> str:
    arms = report["arms"]
    stages = sorted({stage for arm in arms.values() for stage in arm["stages_ms"]})
    columns = ["outside the engine", "engine", *stages, "structure past the engine", "no stage (hops)"]
    versions = f"`{report['before']}` ({report['before_commit']}) before, `{report['commit']}` after" \
        if "before" in report else f"`{report['commit']}`"
    rows = [f"Per page at c=1 on the devset's {len(report['settings']['pages'])} pages, {versions}, "
            f"{report['settings']['rounds']} interleaved rounds, {report['machine']['cpus']} CPUs, ms "
            f"(median over rounds of each round's median page, min-max); target outside the engine <= {TARGET_MS:.0f}:",
            "", "| arm | " + " | ".join(columns) + " | failed |", "|---|" + "---|" * (len(columns) + 1)]
    for name, arm in arms.items():
        cells = [spread_cell(arm["outside_ms"]), spread_cell(arm["engine_ms"]),
                 *(spread_cell(arm["stages_ms"].get(stage)) for stage in stages),
                 spread_cell(arm["structure_on_path_ms"]), spread_cell(arm["unnamed_ms"])]
        failed = sum(report["failures"].get(name, {}).values())
        request = ", ".join(f"{k}={v}" for k, v in report["settings"]["arms"][name].items()) or "shipped request"
        rows.append(f"| {name} ({request}) | "
                    + " | ".join(cells) + f" | {failed} |")
    return "\n".join(rows)


def passed(report: dict) -> bool:
    default = report["arms"].get("after" if "before" in report else "default")
    return default is not None and default["outside_ms"]["median"] <= TARGET_MS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arms", default="default,structure_off")
    parser.add_argument("--devset", default=str(DEVSET))
    parser.add_argument("--before", help="a git ref: measure its tree against the working tree")
    parser.add_argument("--code", help=argparse.SUPPRESS)  # an arm's tree (--before runs each in a process)
    add_report_options(parser, "page_overhead.json")
    options = parser.parse_args()
    run = measure_before_after if options.before else measure
    return measure_or_render(options, lambda: run(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
