"""The vllm engine's checks, run inside the vLLM environment (.venv-vllm) by tests/test_vllm_engine.py:

    .venv-vllm/bin/python tests/vllm_checks.py CHECK MODEL_DIR OUT.json    # CHECK: agree, hol, abort or all

The reference for the tokens is the `vlm` engine (transformers) in the same process, on the same
pages: its inputs are checked against the model's own processor in tests/test_vlm_reference.py.
Each check writes what it saw as JSON; the test asserts on it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from app.schemas import Generation  # noqa: E402 (after the path above)


def pages(count: int) -> list:
    import numpy as np

    from app.synthetic import render_text_page

    return [np.asarray(render_text_page([f"Engine agreement page {i}", "0123456789 " * (1 + i % 3)],
                                        width=260 + 48 * i).convert("RGB")) for i in range(count)]


def engines(model_dir: str, *, with_reference: bool):
    from app.config import Settings
    from app.engines import build_engine
    from app.engines.vllm_engine import VLLMEngine

    settings = Settings(engine="vllm", model_dir=model_dir, warmup=False,
                        vllm={"verify_weights": "off", "dtype": "float32", "max_tokens": 24, "enforce_eager": True,
                              "max_num_seqs": 8, "max_model_len": 2048},
                        vlm={"verify_weights": "off", "max_new_tokens": 24})
    reference = None
    if with_reference:
        from app.engines.vlm import VLMEngine

        reference = build_engine(settings.model_copy(update={"engine": "vlm"}), threads=2)
        assert isinstance(reference, VLMEngine)
        reference.load()
    engine = build_engine(settings, threads=2)
    assert isinstance(engine, VLLMEngine)
    engine.load()
    engine.warmup()  # as the replica does
    return engine, reference


def agree(model_dir: str) -> dict:
    """vLLM's greedy tokens against transformers' for the same pages; then 8 at once against one at a time."""
    from PIL import Image

    engine, reference = engines(model_dir, with_reference=True)
    sample = pages(4)
    expected = reference.generated_ids([Image.fromarray(page) for page in sample])
    alone = [engine._loop.call(engine.generate_tokens(page))[0] for page in sample]

    async def together():
        return await asyncio.gather(*(engine.infer_page(page) for page in sample + sample))

    results = asyncio.run(together())
    singles = [engine._loop.call(engine._read(page, None)) for page in sample]
    engine.shutdown()
    return {"transformers": expected, "vllm": alone,
            "concurrent": [r.markdown for r in results], "single": [r.markdown for r in singles],
            "finish": [r.finish_reason for r in singles], "tokens": [r.generated_tokens for r in singles]}


def no_head_of_line_blocking(model_dir: str) -> dict:
    """One page forced to 256 tokens and seven to 16, sent together: when each finished."""
    engine, _ = engines(model_dir, with_reference=False)
    page = pages(1)[0]
    engine._loop.call(engine._read(page, Generation.exactly(4)))  # warm

    async def timed(length: int):
        await engine.infer_page(page, Generation.exactly(length))
        return length, time.perf_counter()

    async def together():
        started = time.perf_counter()
        done = await asyncio.gather(timed(256), *(timed(16) for _ in range(7)))
        return [(length, round(at - started, 3)) for length, at in done]

    finished = asyncio.run(together())
    engine.shutdown()
    return {"finished_s": finished}


def abort_on_cancel(model_dir: str) -> dict:
    """A page cancelled mid-generation (its client left): how soon the engine stops running it."""
    engine, _ = engines(model_dir, with_reference=False)
    page = pages(1)[0]

    async def scenario():
        task = asyncio.ensure_future(engine.infer_page(page, Generation.exactly(1500)))
        while engine.queue_stats()["running"] == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        running_before = engine.queue_stats()["running"]
        scheduler = vars(engine._scheduler.snapshot())  # vLLM's own figures, not the replica's count
        task.cancel()
        cancelled_at = time.perf_counter()
        while engine.queue_stats()["running"] and time.perf_counter() - cancelled_at < 10:
            await asyncio.sleep(0.01)
        return running_before, round(time.perf_counter() - cancelled_at, 3), engine.queue_stats()["running"], scheduler

    before, seconds, after, scheduler = asyncio.run(scenario())
    engine.shutdown()
    return {"running_before": before, "seconds_to_drop": seconds, "running_after": after, "scheduler": scheduler}


CHECKS = {"agree": agree, "hol": no_head_of_line_blocking, "abort": abort_on_cancel}
CHECKS["all"] = lambda model: {name: check(model) for name, check in list(CHECKS.items()) if name != "all"}

if __name__ == "__main__":
    check, model, out = sys.argv[1:4]
    Path(out).write_text(json.dumps(CHECKS[check](model)))
