"""CPU time per page outside the engine, before and after a change, on the same pages in one run.

    python load/cpu_cost.py --before REF [--rounds 3] [--report load/results/cpu_cost.json]
    python load/cpu_cost.py --render load/results/cpu_cost.json
    python load/cpu_cost.py --additions [--rounds 6]      # issue 29's additions alone
    python load/cpu_cost.py --render load/results/cpu_cost_additions.json

Each arm is a tree of this repository: `--before REF` (taken out with `git archive`) and the
working tree, twice: with `orientation: off` (`after`, what issue 13's target is about) and with
the shipped default `orientation: auto` (the Preprocessor's orientation step, app/orientation,
counted too). An arm runs, in a fresh process of its own, what a page costs on its
way to the engine, with that tree's code:
  - the Preprocessor's decoder sandbox (the tree's own decoder worker: decode or render,
    resize, the page's form on the wire), and the parent's side of the pipe and of the
    shared page buffer;
  - the payload's two hops, Preprocessor -> Ingress -> OCR replica, each as Ray makes it:
    pickle 5 with out-of-band buffers (arrays), the stream and each buffer copied once into
    the object store, read back without a copy (`ray_hop`);
  - the orientation step (the third arm);
  - the OCR replica's turning of the payload into the engine's input array.
CPU time is the arm process's own (every thread) plus its decoder worker's (from /proc,
in clock ticks), summed over every page of a set and divided by the pages. Every arm is
warmed on the first document of each set, untimed; each arm goes first in turn, round by round.

Sets: every image of the devset manifest, at the bundled engine's input budget, and a
20-page PDF of A4 text pages at 150 dpi, rendered at the service's default 150 dpi.

A second table compares the forms a page can travel in between deployments on the devset's
engine-sized pages (CPU to make and to read it back, and its size), which is why the
working tree sends raw pixels.

With --additions (its own report, load/results/cpu_cost_additions.json), issue 29's additions, each
on the pages it runs on, in this process (the working tree; CPU of the process, every thread; the
additions alternating over rounds):
  - the orientation check (app/orientation/confirm.py): only on a page whose turn the looks found,
    so measured on the devset's pages turned 90 degrees (the detector's boxes and the lines' votes);
  - the engine routing with `lang=auto`, the default (app/engines/fraktur.py), on the pages it does not
    find Fraktur: the test of PP-OCR's words for long-s misreadings (the lines read once beforehand,
    untimed) and, on a line image or snippet, Tesseract's look for Fraktur letters;
  - the Fraktur pass: on the pages found Fraktur, the finding, Tesseract's reading and the word vote.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load.common import (  # noqa: E402
    DEFAULT_MANIFEST, ROOT, add_report_options, commit, load_devset, machine, spread_cell, summary,
)

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
TARGET = 0.25  # after / before, issue 13 (orientation off: what issue 13 measured)
ORIENTATION_ENV = "CPU_COST_ORIENTATION"  # the working tree's arms: orientation off, then auto


# --- one arm, in its own process, importing `app` from its tree -------------------------------

def worker_cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total * TICK_S


def ray_hop(value):
    """What passing `value` to another deployment costs: Ray pickles it (protocol 5, buffers out
    of band), copies the stream and the buffers into its object store, and the reader unpickles
    over the stored buffers without copying them. bytes (a PNG) travel in the stream."""
    buffers: list = []
    stream = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    stored_stream, stored_buffers = bytes(stream), [bytes(buffer.raw()) for buffer in buffers]
    return pickle.loads(stored_stream, buffers=stored_buffers)


def arm_module(*names: str):
    """The first of these modules that the arm's tree (the cwd) has: modules moved between commits
    (app/documents.py into app/sandbox/, app/preprocess.py and app/page_size.py into app/pipeline/).
    Looked for as files, because the venv's editable install would find this repository's own."""
    for name in names:
        path = Path.cwd().joinpath(*name.split("."))
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return importlib.import_module(name)
    raise ModuleNotFoundError(f"none of {names} in this tree")


def engine_input_of(documents):
    """The arm's OCR-replica side: PNG decoding in trees before the raw transport, else as_rgb
    (in app/documents.py until it moved to app/page_size.py, now app/page_size.py)."""
    if hasattr(documents, "decode_png"):
        return lambda payload: documents.decode_png(payload.png)
    try:
        as_rgb = arm_module("app.page_size", "app.page_size").as_rgb
    except ModuleNotFoundError:
        as_rgb = documents.as_rgb
    return lambda payload: as_rgb(payload.image)


def payload_maker(settings, to_payload):
    """The Preprocessor's page -> payload step, with the tree's orientation step where it has one,
    in the arm's mode (ORIENTATION in the environment: off or auto)."""
    if "orientation" not in type(settings).model_fields:  # a tree from before orientation
        return lambda page, index: to_payload(page, index, "cpu_cost")
    from app.orientation.upright import Orienter

    mode = os.environ.get(ORIENTATION_ENV, "off")
    share = getattr(settings, "orientation_min_share", None)  # a tree from before the lines' check has none
    orienter = Orienter(mode) if share is None else Orienter(mode, share)

    def payload_of(page, index):
        image, turned = orienter.upright(page.image, None)
        return to_payload(page, image, turned, index, "cpu_cost")
    return payload_of


def run_arm(docs_file: str) -> dict:
    """Every set's CPU seconds and pages, measured with the `app` of the arm's tree (the cwd)."""
    sys.path.insert(0, os.getcwd())  # before this repository's root, which the module put first
    for name in [name for name in sys.modules if name == "app" or name.startswith("app.")]:
        del sys.modules[name]  # load.common imported this repository's app; the arm's tree's is wanted
    import app
    from app.config import Settings
    from app.engines import input_budget
    from app.sandbox import DecodeSandbox

    documents = arm_module("app.sandbox.documents", "app.documents")
    to_payload = arm_module("app.pipeline.preprocess", "app.preprocess").to_payload

    settings = Settings()
    budget = input_budget(settings)
    sets = pickle.loads(Path(docs_file).read_bytes())
    engine_input = engine_input_of(documents)
    payload_of = payload_maker(settings, to_payload)

    async def one(sandbox, data: bytes, content_type: str) -> int:
        pages = 0
        async for page in sandbox.pages(data, content_type, None, label="cpu_cost"):
            payload = payload_of(page, pages)
            for _hop in ("to the ingress", "to the OCR replica"):
                payload = ray_hop(payload)
            engine_input(payload)
            pages += 1
        return pages

    async def measure() -> dict:
        sandbox = DecodeSandbox(settings.limits, budget.max_side, budget.max_pixels, workers=1)
        results = {}
        try:
            for name, docs in sets.items():
                await one(sandbox, *docs[0])  # warm: imports, the worker started, first-use caches
                own, workers, wall = time.process_time(), worker_cpu_s(sandbox.worker_pids()), time.perf_counter()
                pages = 0
                for data, content_type in docs:
                    pages += await one(sandbox, data, content_type)
                results[name] = {"pages": pages,
                                 "cpu_s": time.process_time() - own + worker_cpu_s(sandbox.worker_pids()) - workers,
                                 "wall_s": time.perf_counter() - wall}
        finally:
            sandbox.close()
        return results

    results = asyncio.run(measure())
    return {"app": str(Path(app.__file__).parent), "sets": results}


def arm_process(tree: Path, docs_file: Path, orientation: str = "off") -> dict:
    """A fresh interpreter whose `app` (and its decoder workers') is the tree's."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", ORIENTATION_ENV: orientation}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--arm", str(docs_file)], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"arm {tree} failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["app"]).resolve() != (tree / "app").resolve():
        raise RuntimeError(f"arm {tree} imported {result['app']}")
    return result["sets"]


def tree_at(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", "--format=tar", ref, "app"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


# --- the page sets ------------------------------------------------------------------------------

def page_sets(manifest: Path) -> dict:
    from app.synthetic import pdf_bytes, render_text_page

    devset = [(sample.path.read_bytes(), sample.content_type) for sample in load_devset(manifest)]

    def a4_page(number: int):
        lines = [f"Page {number} line {row}: invoice 10{number:02d}-{row:02d} total {row * 3.5:.2f}"
                 for row in range(32)]
        return render_text_page(lines, width=1240, font_size=22, margin=60).resize((1240, 1754))

    pdf = pdf_bytes((a4_page(number) for number in range(1, 21)), dpi=150)
    return {"devset": devset, "pdf_20_pages_150dpi": [(pdf, "application/pdf")]}


# --- the transport forms ------------------------------------------------------------------------

def png_form(image) -> tuple[bytes, callable]:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)

    def read(data: bytes):
        import numpy as np
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))
    return buffer.getvalue(), read


def raw_form(image) -> tuple[bytes, callable]:
    import numpy as np

    from app.page_size import as_rgb

    shape = (image.height, image.width) if image.mode == "L" else (image.height, image.width, 3)
    return image.tobytes(), lambda data: as_rgb(np.frombuffer(data, np.uint8).reshape(shape))


def raw_zlib_form(image) -> tuple[bytes, callable]:
    blob, read_raw = raw_form(image)
    return zlib.compress(blob, 1), lambda data: read_raw(zlib.decompress(data))


FORMS = {"png (compress 1)": png_form, "raw uint8": raw_form, "raw + zlib 1": raw_zlib_form}


def transport_table(devset: list, rounds: int) -> dict:
    """CPU ms per page to make each form, carry it one Ray hop, and read it back; its size."""
    from app.config import Settings
    from app.sandbox.documents import iter_pages
    from app.engines import input_budget
    from app.page_size import InputBudget, fit_to_budget

    budget = input_budget(Settings())
    target = InputBudget(budget.max_side, budget.max_pixels)
    images = [fit_to_budget(page.image, budget.max_side, budget.max_pixels)[0]
              for data, content_type in devset
              for page in iter_pages(data, content_type, None, Settings().limits, target)]
    samples: dict = {name: [] for name in FORMS}
    sizes = {name: sum(len(FORMS[name](image)[0]) for image in images) for name in FORMS}
    for round_ in range(rounds):
        order = list(FORMS) if round_ % 2 == 0 else list(reversed(FORMS))
        for name in order:
            started = time.process_time()
            for image in images:
                blob, read = FORMS[name](image)
                read(ray_hop(blob))
            samples[name].append((time.process_time() - started) * 1000 / len(images))
    return {name: {"cpu_ms_per_page": summary(samples[name]), "mean_bytes_per_page": sizes[name] / len(images)}
            for name in FORMS} | {"pages": len(images)}


# --- issue 29's additions ------------------------------------------------------------------------

def additions_table(devset: list, rounds: int) -> dict:
    """CPU ms per page of each addition on the pages it runs on (see the module's docstring)."""
    import numpy as np

    from app.config import Settings
    from app.engines import build_engine, input_budget
    from app.engines.fraktur import FrakturPass
    from app.orientation.confirm import line_votes
    from app.orientation.geometry import turn
    from app.orientation.models import LineReader
    from app.page_size import InputBudget, as_rgb, fit_to_budget
    from app.sandbox.documents import iter_pages

    settings = Settings()
    budget = input_budget(settings)
    target = InputBudget(budget.max_side, budget.max_pixels)
    pages = [as_rgb(np.asarray(fit_to_budget(page.image, budget.max_side, budget.max_pixels)[0]))
             for data, content_type in devset
             for page in iter_pages(data, content_type, None, settings.limits, target)]
    engine = build_engine(settings, threads=1)
    engine.load()
    lines = [engine.infer([page], langs=["latin"])[0].lines for page in pages]  # untimed: the engine's own work
    fraktur = FrakturPass(settings.tesseract.tessdata_dir, threads=1)
    found = [i for i, page_lines in enumerate(lines) if fraktur.finds(pages[i], page_lines)[0]]
    others = [i for i in range(len(pages)) if i not in found]
    reader = LineReader()
    turned = [turn(page, 270) for page in pages]  # uploaded so that a turn of 90 makes it upright

    def check():
        for page in turned:
            line_votes(page, reader.boxes(page), reader)

    def routing():  # what finding Fraktur costs a page that is not (the pages found pay it within the pass)
        for i in others:
            fraktur.finds(pages[i], lines[i])

    def second_reading():
        for i in found:
            fraktur.apply(pages[i], lines[i], "auto")

    steps = {"orientation check": (check, len(turned)), "routing, lang=auto": (routing, len(others)),
             "Fraktur pass": (second_reading, len(found))}
    for step, _ in steps.values():
        step()  # warm
    samples: dict = {name: [] for name in steps}
    for round_ in range(rounds):
        order = list(steps)[round_ % 3:] + list(steps)[:round_ % 3]
        for name in order:
            step, count = steps[name]
            started = time.process_time()
            step()
            samples[name].append((time.process_time() - started) * 1000 / max(1, count))
    return {name: {"pages": steps[name][1], "cpu_ms_per_page": summary(samples[name])} for name in steps}


# --- the run, the report ------------------------------------------------------------------------

def measure(options) -> dict:
    sets = page_sets(options.manifest)
    with tempfile.TemporaryDirectory(prefix="cpu-cost-") as work:
        docs_file = Path(work) / "docs.pickle"
        docs_file.write_bytes(pickle.dumps(sets))
        before = tree_at(options.before, Path(work) / "before")
        arms = {"before": (before, "off"), "after": (ROOT, "off"), "after_orientation": (ROOT, "auto")}
        per_round = []
        for round_ in range(options.rounds):
            order = list(arms)[round_ % 3:] + list(arms)[:round_ % 3]  # each arm first in turn
            measured = {arm: arm_process(arms[arm][0], docs_file, arms[arm][1]) for arm in order}
            per_round.append(measured)
            print(f"round {round_ + 1}: " + ", ".join(
                f"{arm} {name} {m['cpu_s'] * 1000 / m['pages']:.1f} ms/page"
                for arm, sets_ in measured.items() for name, m in sets_.items()), flush=True)
    results = {}
    for name in sets:
        ms = {arm: [r[arm][name]["cpu_s"] * 1000 / r[arm][name]["pages"] for r in per_round] for arm in arms}
        results[name] = {
            "pages": per_round[0]["after"][name]["pages"],
            "before_ms": summary(ms["before"]), "after_ms": summary(ms["after"]),
            "ratio": summary([a / b for b, a in zip(ms["before"], ms["after"])]),
            "after_orientation_ms": summary(ms["after_orientation"]),
            "orientation_ms": summary([o - a for a, o in zip(ms["after"], ms["after_orientation"])]),
            "ratio_orientation": summary([o / b for b, o in zip(ms["before"], ms["after_orientation"])]),
        }
    return {"benchmark": "cpu_cost", "commit": commit(), "before": options.before,
            "before_commit": subprocess.run(["git", "rev-parse", "--short", options.before], cwd=ROOT,
                                            capture_output=True, text=True).stdout.strip(),
            "machine": machine(),
            "settings": {"rounds": options.rounds, "engine": "ppocr (its input budget)", "pdf_dpi": 150,
                         "decode_workers": 1, "target_ratio": TARGET,
                         "arms": "before; after with orientation: off; after with orientation: auto"},
            "sets": results, "transport": transport_table(sets["devset"], options.rounds)}


def measure_additions(options) -> dict:
    devset = [(sample.path.read_bytes(), sample.content_type) for sample in load_devset(options.manifest)]
    return {"benchmark": "cpu_cost_additions", "commit": commit(), "machine": machine(),
            "settings": {"rounds": options.rounds, "threads": 1, "manifest": str(options.manifest)},
            "additions": additions_table(devset, options.rounds)}


def render_additions(report: dict) -> str:
    rows = [f"Issue 29's additions, each on the devset pages it runs on, `{report['commit']}`, in process, one "
            f"thread, {report['settings']['rounds']} interleaved rounds (median, min-max):", "",
            "| addition | runs on | pages | CPU ms/page |", "|---|---|---|---|"]
    runs_on = {"orientation check": "pages whose turn the looks found (here: the devset turned 90)",
               "routing, lang=auto": "pages not found Fraktur", "Fraktur pass": "pages found Fraktur"}
    for name, row in report["additions"].items():
        cpu = row["cpu_ms_per_page"]
        rows.append(f"| {name} | {runs_on.get(name, '')} | {row['pages']} | "
                    f"{cpu['median']:.1f} ({cpu['min']:.1f}-{cpu['max']:.1f}) |")
    return "\n".join(rows)


def render(report: dict) -> str:
    rows = [f"CPU per page outside the engine, `{report['before']}` ({report['before_commit']}) against "
            f"{report['commit']}, {report['settings']['rounds']} interleaved rounds, "
            f"{report['machine']['cpus']} CPUs (median, min-max):", "",
            "| pages | before ms/page | after, `orientation: off` | after / before | after, `orientation: auto` "
            "| of which orientation | after / before |", "|---|---|---|---|---|---|---|"]
    for name, row in report["sets"].items():
        cells = [spread_cell(row["before_ms"]), spread_cell(row["after_ms"]), f"**{spread_cell(row['ratio'], 3)}**"]
        if "after_orientation_ms" in row:
            cells += [spread_cell(row["after_orientation_ms"]), spread_cell(row["orientation_ms"]),
                      f"**{spread_cell(row['ratio_orientation'], 3)}**"]
        else:  # a report from before the orientation step
            cells += ["-", "-", "-"]
        rows.append(f"| {name} ({row['pages']}) | " + " | ".join(cells) + " |")
    transport = report["transport"]
    rows += ["", f"Page forms between deployments, on the devset's {transport['pages']} engine-sized pages "
             "(make, one Ray hop, read back):", "", "| form | CPU ms/page | size per page |", "|---|---|---|"]
    for name, row in transport.items():
        if name != "pages":
            cpu = row["cpu_ms_per_page"]
            rows.append(f"| {name} | {cpu['median']:.1f} ({cpu['min']:.1f}-{cpu['max']:.1f}) "
                        f"| {row['mean_bytes_per_page'] / 2**20:.2f} MiB |")
    return "\n".join(rows)


def passed(report: dict) -> bool:
    return all(row["ratio"]["median"] <= TARGET for row in report["sets"].values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the git ref to compare the working tree against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # internal: measure one tree, print JSON
    parser.add_argument("--additions", action="store_true", help="measure issue 29's additions alone")
    add_report_options(parser, "cpu_cost.json")
    options = parser.parse_args()
    if options.arm:
        print(json.dumps(run_arm(options.arm)))
        return 0
    from load.common import measure_or_render

    if options.additions or (options.render and "additions" in Path(options.render).name):
        if options.report.endswith("/cpu_cost.json"):
            options.report = str(ROOT / "load" / "results" / "cpu_cost_additions.json")
        return measure_or_render(options, lambda: measure_additions(options), render_additions, lambda r: True)

    if not options.render and not options.before:
        parser.error("--before REF is needed to measure")
    return measure_or_render(options, lambda: measure(options), render, passed)


if __name__ == "__main__":
    sys.exit(main())
