"""Engines behind one registry (app/engines/registry.py): one constructor signature, the input budget
in the protocol, and an engine that schedules its own batches taking pages as they come.

The toy engine (tests/toy_engine.py) is added as a user would add one: its module, and
`engine: tests.toy_engine:ToyEngine` with its `engine_options` in the configuration."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from app.config import Settings
from app.engines import build_engine, input_budget
from app.engines.registry import ENGINES
from app.schemas import PagePayload
from app.synthetic import png_bytes, render_text_page

TOY = {"engine": "tests.toy_engine:ToyEngine", "engine_options": {"label": "toy-7", "delay_s": 0.5, "max_side": 500}}


def payload(number: int, width: int = 300, height: int = 200) -> PagePayload:
    image = np.full((height, width, 3), 255, dtype=np.uint8)
    return PagePayload(request_id=f"r{number}", index=0, page_number=number, image=image, width=width, height=height,
                       source_width=width, source_height=height, scale=1.0)


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_registered_engine_is_built_one_way_and_knows_its_budget(name, tmp_path):
    if name == "vlm":
        from app.tools.tiny_vlm import build_got_ocr2

        settings = Settings(engine=name, model_dir=str(build_got_ocr2(tmp_path / "got")), vlm={"verify_weights": "off"})
    elif name == "vllm":  # built without vLLM itself: it is imported on load(), in its own environment
        from app.tools.tiny_vlm import build_qwen2_5_vl

        settings = Settings(engine=name, model_dir=str(build_qwen2_5_vl(tmp_path / "qwen")),
                            vllm={"verify_weights": "off"})
    else:
        settings = Settings(engine=name)
    engine = build_engine(settings, threads=1, gpu_share=0.5)
    assert engine.info.name == name
    budget = input_budget(settings)
    assert budget.max_side > 0 and budget.max_pixels > 0


def test_an_unknown_engine_or_one_without_its_model_is_refused_before_anything_is_built():
    from app.serve.builder import build_app

    with pytest.raises(ValueError, match="engine must be one of"):
        build_app({"engine": "nonesuch"})
    with pytest.raises(ValueError, match="needs model_dir"):
        build_app({"engine": "vllm"})


def test_an_engine_of_ones_own_is_one_module_plus_its_settings():
    settings = Settings(**TOY)
    assert input_budget(settings).max_side == 500  # the Preprocessor sizes pages for it
    engine = build_engine(settings, threads=1)
    assert engine.info.version == "toy-7"


def test_an_engine_that_schedules_its_own_batches_gets_every_page_as_it_comes(ray_session):
    """Eight pages at once reach the engine together, none waiting for a batch to form or end."""
    from app.pipeline.ocr_model import OCRModel
    from app.pipeline.ocr_settings import OCRReplicaSettings

    model = OCRModel.func_or_class(OCRReplicaSettings.of(Settings(**TOY, warmup=False)))

    async def eight():
        return await asyncio.gather(*(model.infer(payload(n, width=100 + n)) for n in range(8)))

    started = time.perf_counter()
    results = asyncio.run(eight())
    seconds = time.perf_counter() - started
    assert [r.result.markdown for r in results] == [f"toy-7 {100 + n}x200" for n in range(8)]
    assert model._engine.most_in_flight == 8 and seconds < 8 * 0.5 / 2, seconds
    assert {r.batch_size for r in results} == {1}


def test_the_toy_engine_serves_through_the_whole_graph_over_http(service_url, client):
    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    from ray import serve

    deploy(build_app({**TOY, "engine_threads": 1, "ocr_replicas": 1, "ocr_num_cpus": 0.2}), name="toy",
           route_prefix="/toy", timeout_s=240)
    image = render_text_page(["A toy page"], width=900)  # wider than the toy's budget: sized down to 500
    try:
        response = client.post(f"{service_url}/toy/v1/ocr", files={"file": ("p.png", png_bytes(image), "image/png")})
    finally:
        serve.delete("toy")  # its replicas' memory back to the session's other applications
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["engine"]["name"] == "toy" and body["engine"]["version"] == "toy-7"
    width, height = image.size
    assert body["pages"][0]["text"] == f"toy-7 500x{round(height * 500 / width)}"


def test_the_optional_features_are_the_protocols_with_defaults_and_asked_directly():
    """takes_lang, takes_generation, page_capacity, queue_stats, last_peak_memory_mib, shutdown: in
    OCREngine with their defaults; every engine subclasses it; the OCR replica asks without getattr."""
    import importlib
    import re
    from pathlib import Path

    from app.engines.base import OCREngine
    from app.engines.registry import engine_class

    for name in ENGINES:
        module, _, attribute = ENGINES[name].partition(":")
        try:
            cls = getattr(importlib.import_module(module), attribute)
        except ImportError:  # vLLM lives in its own environment (tests/test_vllm_engine.py builds it there)
            continue
        assert issubclass(cls, OCREngine), name
    bare = engine_class("tests.toy_engine:ToyEngine").__mro__[-2]
    assert bare is OCREngine
    defaults = OCREngine.__new__(OCREngine)
    assert (defaults.takes_lang, defaults.takes_generation, defaults.schedules_own_batches) == (False, False, False)
    assert defaults.page_capacity is None and defaults.last_peak_memory_mib is None
    assert defaults.queue_stats() is None and defaults.batch_limits() is None and defaults.shutdown() is None

    class Stranger:  # an engine of one's own that forgot the base class
        def __init__(self, settings, threads, gpu_share):
            pass

    import sys
    import types

    sys.modules["stranger_engine"] = types.SimpleNamespace(Stranger=Stranger)
    try:
        with pytest.raises(TypeError, match="must subclass"):
            build_engine(Settings(engine="stranger_engine:Stranger"), threads=1)
    finally:
        del sys.modules["stranger_engine"]
    replica = (Path(__file__).resolve().parents[1] / "app" / "pipeline" / "ocr_model.py").read_text()
    assert not re.search(r"(getattr|hasattr)\(self\._engine", replica)
