"""The `vlm` engine's GPU path, held to account on the CPU: what it does when the GPU runs out
of memory, which dtype each card gets, how much memory a replica claims, one warm-up probe per
GPU at a time, and the guards that watch each row while a batch generates."""

from __future__ import annotations

import multiprocessing
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from app.config import Settings
from app.engines import build_engine, input_budget
from app.engines.page_result import SAME_TOKEN_RUN
from app.engines.vlm_device import DeviceRefused, choose_dtype, memory_fraction, one_probe_per_gpu
from app.errors import ServiceUnavailable
from app.synthetic import render_text_page
from app.tools.tiny_vlm import build_got_ocr2, build_qwen2_5_vl

MAX_NEW_TOKENS = 64


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("gpu-path-models")
    return {"got_ocr2": build_got_ocr2(root / "got"), "qwen2_5_vl": build_qwen2_5_vl(root / "qwen")}


def engine_for(model_dir: Path, **vlm):
    settings = Settings(engine="vlm", model_dir=str(model_dir),
                        vlm={"max_new_tokens": MAX_NEW_TOKENS, "verify_weights": "off", **vlm})
    engine = build_engine(settings, threads=2)
    engine.load()
    return engine


@pytest.fixture(scope="module")
def got(models):
    return engine_for(models["got_ocr2"])


def pages() -> list[np.ndarray]:
    specs = [("alpha", 800, 36), ("beta beta", 420, 24), ("gamma 42 delta", 1300, 48), ("x", 260, 30)]
    return [np.asarray(render_text_page([text], width=width, font_size=size)) for text, width, size in specs]


# --- out of memory -------------------------------------------------------------------------------

class Held:
    """Stands for device memory a failed generate still holds (its inputs, a partial KV cache)."""


def test_out_of_memory_split_runs_after_the_failed_call_has_let_go_of_its_memory(got):
    """The failing call keeps `Held` alive in its frame, as a real OOM's frames keep tensors alive.
    While any is alive the 'device' is full: halves run inside the except block would run out too."""
    alive = weakref.WeakSet()
    seen = []

    def fault(images):
        seen.append(len(images))
        if alive:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (memory still held)")
        if len(images) == 4:
            held = Held()  # referenced by this frame, hence by the traceback, until it is let go
            alive.add(held)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    expected = [r.markdown for r in got.infer(pages())]
    got.fault_hook = fault
    try:
        results = got.infer(pages())
    finally:
        got.fault_hook = None
    assert seen == [4, 2, 2], "the halves must run once the failed call's memory is free"
    assert [r.markdown for r in results] == expected


def test_a_page_that_does_not_fit_alone_fails_by_itself(got):
    poison_width = pages()[2].shape[1]

    def fault(images):
        if len(images) > 1 or images[0].width == poison_width:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    got.fault_hook = fault
    try:
        results = got.infer(pages())
    finally:
        got.fault_hook = None
    assert isinstance(results[2], ServiceUnavailable) and results[2].code == "gpu_out_of_memory"
    assert all(not isinstance(results[i], Exception) for i in (0, 1, 3))


# --- dtype ---------------------------------------------------------------------------------------

CARDS = {"T4": (7, 5), "V100": (7, 0), "A10": (8, 6), "A100": (8, 0), "L4": (8, 9), "H100": (9, 0)}


@pytest.mark.parametrize("card, family, fp16_safe, expected", [
    ("T4", "got_ocr2", True, "float16"),
    ("T4", "qwen2_5_vl", False, DeviceRefused),
    ("V100", "qwen2_5_vl", False, DeviceRefused),
    ("A10", "got_ocr2", True, "bfloat16"),
    ("A10", "qwen2_5_vl", False, "bfloat16"),
    ("A100", "got_ocr2", True, "bfloat16"),
    ("A100", "qwen2_5_vl", False, "bfloat16"),
    ("L4", "qwen2_5_vl", False, "bfloat16"),
    ("H100", "got_ocr2", True, "bfloat16"),
    ("H100", "qwen2_5_vl", False, "bfloat16"),
])
def test_auto_dtype_by_card_and_family(card, family, fp16_safe, expected):
    if expected is DeviceRefused:
        with pytest.raises(DeviceRefused) as refused:
            choose_dtype("auto", "cuda", family, fp16_safe, CARDS[card], gpu_name=f"NVIDIA {card}")
        message = str(refused.value)
        assert f"NVIDIA {card}" in message and "vlm.dtype: float32" in message and "8.0" in message
    else:
        assert choose_dtype("auto", "cuda", family, fp16_safe, CARDS[card], gpu_name=card) == expected


def test_explicit_dtypes_that_would_be_wrong_or_emulated_are_refused():
    with pytest.raises(DeviceRefused, match="not safe in float16"):
        choose_dtype("float16", "cuda", "qwen2_5_vl", False, CARDS["H100"])
    with pytest.raises(DeviceRefused, match="no native bfloat16"):
        choose_dtype("bfloat16", "cuda", "got_ocr2", True, CARDS["T4"])
    assert choose_dtype("float32", "cuda", "qwen2_5_vl", False, CARDS["T4"]) == "float32"
    assert choose_dtype("float16", "cuda", "got_ocr2", True, CARDS["T4"]) == "float16"
    assert choose_dtype("auto", "cpu", "qwen2_5_vl", False) == "float32"


# --- memory share and the warm-up probe ----------------------------------------------------------

def test_four_quarter_shares_with_their_contexts_fit_on_one_card():
    total, context, margin = 80 * 2**30, 600 * 2**20, 256 * 2**20
    fraction = memory_fraction(0.25, total, context, margin)
    assert fraction == pytest.approx((0.25 * total - context - margin) / total)
    assert 4 * (fraction * total + context) + 4 * margin == pytest.approx(total)
    assert memory_fraction(1.0, total, context, margin) < 1.0
    with pytest.raises(DeviceRefused, match="larger ocr_num_gpus"):
        memory_fraction(0.01, 40 * 2**30, 600 * 2**20, 256 * 2**20)


def _probe(lock_dir: str, key: str, log, hold_s: float) -> None:
    with one_probe_per_gpu(key, lock_dir):
        log.put(("start", key, time.monotonic()))
        time.sleep(hold_s)
        log.put(("end", key, time.monotonic()))


def test_replicas_on_one_gpu_probe_one_at_a_time_and_other_gpus_are_not_held_up(tmp_path):
    context = multiprocessing.get_context("spawn")
    log = context.Queue()
    keys = ["GPU-aaaa", "GPU-aaaa", "GPU-aaaa", "GPU-bbbb"]
    processes = [context.Process(target=_probe, args=(str(tmp_path), key, log, 0.4)) for key in keys]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    events = sorted((log.get(timeout=5) for _ in range(2 * len(keys))), key=lambda event: event[2])
    spans = {}
    for kind, key, at in events:
        spans.setdefault(key, []).append((kind, at))
    shared = [kind for kind, _ in spans["GPU-aaaa"]]
    assert shared == ["start", "end"] * 3, f"probes on one GPU overlapped: {shared}"
    other_start = spans["GPU-bbbb"][0][1]
    assert other_start < spans["GPU-aaaa"][-1][1], "another GPU's probe waited for this one's"


# --- guards while a batch generates --------------------------------------------------------------

class LoopRow:
    """Makes one row of a batch write the same phrase again and again, as a looping page does."""

    def __init__(self, row: int, phrase_ids: list[int]):
        self.row, self.phrase, self.steps = row, phrase_ids, 0

    def __call__(self, input_ids, scores):
        token = self.phrase[self.steps % len(self.phrase)]
        self.steps += 1
        scores = scores.clone()
        scores[self.row] = -float("inf")
        scores[self.row, token] = 0.0
        return scores


def test_a_looping_page_stops_early_and_its_batch_mates_read_as_before(got):
    batch = pages()
    before = got.infer(batch)
    phrase = got._family.tokenizer.encode("TOTAL 1.00 ")
    got.extra_logits_processors = [LoopRow(1, phrase)]
    try:
        after = got.infer(batch)
    finally:
        got.extra_logits_processors = []
    looping = after[1]
    assert not looping.valid and looping.finish_reason == "repetition"
    assert "repetition" in looping.notes[0] and looping.markdown.startswith("TOTAL 1.00")
    assert looping.generated_tokens < MAX_NEW_TOKENS, "the loop ran to max_new_tokens"
    for i in (0, 2, 3):
        assert (after[i].markdown, after[i].finish_reason, after[i].generated_tokens) == \
               (before[i].markdown, before[i].finish_reason, before[i].generated_tokens)
    alone = LoopRow(0, phrase)  # the looping page alone: the batch itself must end early
    got.extra_logits_processors = [alone]
    try:
        [result] = got.infer(batch[1:2])
    finally:
        got.extra_logits_processors = []
    assert result.finish_reason == "repetition" and alone.steps < MAX_NEW_TOKENS, f"{alone.steps} decoding steps"


def test_one_token_over_and_over_is_not_text(got):
    """What an fp16 overflow looks like from outside: NaN logits, argmax 0, every step."""
    class NaNRow:
        def __call__(self, input_ids, scores):
            scores = scores.clone()
            scores[0] = float("nan")
            return scores

    got.extra_logits_processors = [NaNRow()]
    try:
        [nan_page, other] = got.infer(pages()[:2])
    finally:
        got.extra_logits_processors = []
    assert (nan_page.valid, nan_page.finish_reason, nan_page.markdown) == (False, "degenerate", "")
    assert nan_page.generated_tokens <= SAME_TOKEN_RUN + 16, "a degenerate row must be stopped early"
    assert other.valid or other.finish_reason == "length"
    assert other.finish_reason != "degenerate"


def test_forced_output_lengths_per_row(got):
    """The benchmark's lengths: each page writes exactly its number of tokens, then its end token."""
    lengths = [3, 17, 9, 30]
    results = got.infer(pages(), output_lengths=lengths)
    assert [r.generated_tokens for r in results] == [n + 1 for n in lengths]
    assert {r.finish_reason for r in results} == {"stop"}


# --- the input budget ----------------------------------------------------------------------------

def test_each_family_has_its_own_input_budget_and_the_preprocessor_knows_it(models, tmp_path):
    def budget(model_dir, **vlm):
        return input_budget(Settings(engine="vlm", model_dir=str(model_dir), vlm=vlm))

    assert budget(models["qwen2_5_vl"]).max_pixels == 1280 * 28 * 28
    assert budget(models["got_ocr2"]).max_pixels == 1024 * 1024
    assert budget(models["qwen2_5_vl"], max_pixels=800_000).max_pixels == 800_000
    assert budget(tmp_path / "absent", family="qwen2_5_vl").max_pixels == 1280 * 28 * 28
    # A node without the model directory cannot tell the family: the largest default, never a smaller one.
    assert budget(tmp_path / "absent").max_pixels == 1024 * 1024


def test_qwen_reads_a_page_at_most_at_its_max_pixels(models):
    cap = 28 * 28 * 16
    engine = engine_for(models["qwen2_5_vl"], max_pixels=cap)
    big = np.asarray(render_text_page(["a large page"], width=1300, font_size=48).convert("RGB"))
    inputs = engine.model_inputs([__import__("PIL.Image", fromlist=["Image"]).fromarray(big)])
    [grid] = inputs["image_grid_thw"].tolist()
    assert grid[1] * grid[2] * 14 * 14 <= cap
    assert int(inputs["mm_token_type_ids"].sum()) == grid[1] * grid[2] // 4


def test_a_row_that_repeats_one_token_is_stopped_and_marked(got):
    """A token that decodes to nothing (here the image placeholder) hides a loop from the text-level
    guard; the same token again and again is caught on its own."""
    placeholder = got._family.tokenizer.convert_tokens_to_ids("<imgpad>")
    stuck_row = LoopRow(0, [placeholder])
    got.extra_logits_processors = [stuck_row]
    try:
        [stuck] = got.infer(pages()[:1])
    finally:
        got.extra_logits_processors = []
    assert (stuck.valid, stuck.finish_reason, stuck.markdown) == (False, "degenerate", "")
    assert stuck_row.steps < MAX_NEW_TOKENS, f"{stuck_row.steps} decoding steps: the row was not stopped"
