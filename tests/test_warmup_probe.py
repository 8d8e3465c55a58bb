"""The VLM warm-up's batch search with an injected memory model: it must find the largest batch that fits."""

from __future__ import annotations

import threading

import pytest

from app.engines import vlm_probe
from app.engines.warmup_probe import budget_page_size, largest_fitting_batch


@pytest.mark.parametrize("capacity_gib", [10, 17, 23.5, 40, 79, 140])
@pytest.mark.parametrize("per_page_gib, concurrency", [(0.7, 1), (0.7, 2), (1.9, 3), (0.05, 4)])
@pytest.mark.parametrize("max_batch", [1, 7, 32, 100])
def test_finds_the_largest_batch_that_fits(capacity_gib, per_page_gib, concurrency, max_batch):
    weights_gib = 8.0
    probes = []

    def fits(pages: int) -> bool:  # the memory model: weights + every concurrent batch's pages
        probes.append(pages)
        return weights_gib + concurrency * pages * per_page_gib <= capacity_gib

    found = largest_fitting_batch(fits, max_batch)
    expected = max([b for b in range(1, max_batch + 1) if fits(b)], default=0)
    probes_used = len(probes) - max_batch  # the brute force above added max_batch probes
    assert found == expected
    assert probes_used <= 2 * max(1, max_batch).bit_length() + 1  # logarithmic, not a scan
    assert all(p <= max_batch for p in probes)


def test_the_engine_probe_counts_concurrent_batches(tiny_got_engine, monkeypatch):
    engine, page = tiny_got_engine
    capacity_pages = 10
    in_flight, lock, verdict = [0], threading.Lock(), {}

    def judge():  # runs once both batches are on the device: their pages together must fit
        verdict["fits"] = in_flight[0] <= capacity_pages

    barrier = threading.Barrier(2, action=judge, timeout=10)

    def memory_model(probed_engine, images):  # the batches of one probe overlap, as concurrent batches do
        with lock:
            in_flight[0] += len(images)
        barrier.wait()
        fits = verdict["fits"]
        barrier.wait()  # both have read the verdict
        with lock:
            in_flight[0] -= len(images)
        if not fits:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(vlm_probe, "kv_bound_forward", memory_model)
    monkeypatch.setattr(engine, "_concurrency", 2)
    assert largest_fitting_batch(lambda size: vlm_probe.fits(engine, page, size), 32) == 5  # 2 x 5 = 10 pages


def test_the_kv_bound_forward_keeps_a_cache_as_long_as_the_prompt_and_max_new_tokens(tiny_got_engine):
    engine, page = tiny_got_engine
    prompt = engine.model_inputs([page])["input_ids"].shape[1]
    assert vlm_probe.kv_bound_forward(engine, [page, page]) == prompt + engine._options.max_new_tokens


def test_budget_page_is_a4_shaped_and_within_the_budget():
    width, height = budget_page_size(2048, 2048 * 2048)
    assert height == 2048 and width == int(2048 / (297 / 210))
    width, height = budget_page_size(4096, 1_000_000)
    assert width * height <= 1_000_000 and abs(height / width - 297 / 210) < 0.01


@pytest.fixture(scope="module")
def tiny_got_engine(tmp_path_factory):
    from PIL import Image

    from app.config import Settings
    from app.engines import build_engine
    from app.engines.vlm import VLMEngine
    from app.tools.tiny_vlm import build_got_ocr2
    from app.ops.weights import write_manifest

    model_dir = build_got_ocr2(tmp_path_factory.mktemp("probe") / "tiny-got")
    write_manifest(model_dir)
    settings = Settings(engine="vlm", model_dir=str(model_dir), device="cpu",
                        vlm={"max_new_tokens": 16, "verify_weights": "size"})
    engine = build_engine(settings, threads=1)
    assert isinstance(engine, VLMEngine)
    engine.load()
    return engine, Image.new("RGB", (400, 566), "white")
