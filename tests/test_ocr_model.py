"""How the OCR deployment keeps a bad page from its batch-mates, in process with a fake batch engine
(tests/toy_engine.py:BatchToyEngine): the split on an engine failure, an undecodable payload, the
clamp of the batching knobs to what the device holds, and the batcher a reconfigure keeps or swaps."""

from __future__ import annotations

import numpy as np
import pytest

from app.config import Settings
from app.errors import EngineFailure, UnprocessableDocument
from app.schemas import PagePayload

ENGINE = "tests.toy_engine:BatchToyEngine"


@pytest.fixture(autouse=True)
def _session_ray(ray_session):
    """OCRModel asks Ray for its resources: the session's Ray, not one it would start by itself."""


def model(**engine_options):
    from app.pipeline.ocr_model import OCRModel
    from app.pipeline.ocr_settings import OCRReplicaSettings

    return OCRModel.func_or_class(OCRReplicaSettings.of(Settings(engine=ENGINE, engine_options=engine_options,
                                                                 warmup=False)))


def page(number: int, width: int, image=None) -> PagePayload:
    pixels = np.full((20, width, 3), 255, dtype=np.uint8) if image is None else image
    return PagePayload(request_id="r", index=number - 1, page_number=number, image=pixels, width=width, height=20,
                       source_width=width, source_height=20, scale=1.0)


def test_an_engine_failure_fails_only_the_page_that_caused_it():
    ocr = model()
    outcomes = ocr._infer_batch([page(1, 40), page(2, 13), page(3, 50)])
    assert ocr._engine.calls == [3, 1, 1, 1], "the batch failed, then each page ran alone"
    assert [o.result.markdown for o in (outcomes[0], outcomes[2])] == ["40x20", "50x20"]
    assert isinstance(outcomes[1], EngineFailure) and "page 2" in outcomes[1].message
    assert "broke" not in outcomes[1].message, "the engine's own text stays in the log"


def test_an_undecodable_payload_fails_alone_and_never_reaches_the_engine():
    ocr = model()
    outcomes = ocr._infer_batch([page(1, 40), page(2, 30, image=np.zeros((5,), dtype=np.float64)), page(3, 50)])
    assert isinstance(outcomes[1], UnprocessableDocument) and "page 2" in outcomes[1].message
    assert [outcomes[0].result.markdown, outcomes[2].result.markdown] == ["40x20", "50x20"]
    assert ocr._engine.calls == [2]
    assert outcomes[0].batch_size == 3  # the batch as it was gathered


def test_the_batching_knobs_are_clamped_to_what_the_device_holds():
    ocr = model(batch_limit=(3, 1000))
    assert (ocr._config.max_batch_size, ocr._config.max_batch_pixels) == (3, 1000)
    ocr.reconfigure({"max_batch_size": 2, "max_batch_pixels": 10_000_000})
    assert (ocr._config.max_batch_size, ocr._config.max_batch_pixels) == (2, 1000)
    unlimited = model()
    assert unlimited._config.max_batch_size == Settings().batching.max_batch_size


@pytest.mark.parametrize("concurrent, swapped", [(1, False), (2, True)])
def test_a_reconfigure_keeps_the_batcher_unless_its_concurrency_changes(concurrent, swapped):
    ocr = model()
    before = ocr._batcher
    ocr.reconfigure({"max_batch_size": 5, "max_concurrent_batches": concurrent})
    assert (ocr._batcher is not before) == swapped
    assert ocr._config.max_batch_size == 5 and ocr._config.max_concurrent_batches == concurrent
