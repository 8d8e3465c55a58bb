"""The OpenAI-compatible API, spoken to by the real `openai` SDK over real HTTP.

The reference for what the API answers is /v1/ocr on the same page: the chat content must be its
text, streamed or not, on the session's PP-OCR service and on a `vlm` app of the tiny Qwen2.5-VL.
The `vlm` app also shows what static batches do to a short page sent beside a long one (it waits);
tests/test_vllm_service.py shows the `vllm` engine on the same test.
"""

from __future__ import annotations

import base64
import concurrent.futures
import time

import openai
import pytest

from app.synthetic import png_bytes, render_text_page
from tests.error_walk import check_error

VLM_CAP = 256


def data_url(document: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(document).decode()}"


def page_message(document: bytes, media_type: str = "image/png") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(document, media_type)}},
                                         {"type": "text", "text": "Read this page."}]}]


def sdk(base_url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=300)


def streamed(api: openai.OpenAI, model: str, messages: list, **knobs) -> tuple[list[str], list]:
    """(the content pieces in order, every chunk) of a streamed completion."""
    chunks = list(api.chat.completions.create(model=model, messages=messages, stream=True,
                                              stream_options={"include_usage": True}, **knobs))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    return pieces, chunks


def ocr_text(client, url: str, document: bytes, media_type: str = "image/png") -> str:
    response = client.post(f"{url}/v1/ocr", params={"orientation": "off"},
                           files={"file": ("doc", document, media_type)})
    assert response.status_code == 200, response.text
    return response.json()["text"]


def test_the_sdk_reads_what_v1_ocr_reads_streamed_and_not(service_url, client, invoice_png):
    api = sdk(service_url)
    [model] = api.models.list().data
    assert model.id.startswith("rapidocr") and model.owned_by
    expected = ocr_text(client, service_url, invoice_png)
    assert "INVOICE 4711" in expected
    messages = [{"role": "system", "content": "You are an OCR engine."}] + page_message(invoice_png)
    answer = api.chat.completions.create(model=model.id, messages=messages)
    assert answer.choices[0].message.content == expected
    assert answer.choices[0].finish_reason == "stop" and answer.object == "chat.completion"
    assert answer.usage.completion_tokens == 0 and answer.usage.total_tokens == 0  # PP-OCR writes no tokens
    pieces, chunks = streamed(api, model.id, messages)
    assert "".join(pieces) == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].choices == []


def test_a_pdf_streams_one_chunk_per_page_in_page_order(service_url, client, three_page_pdf):
    api = sdk(service_url)
    model = api.models.list().data[0].id
    expected = ocr_text(client, service_url, three_page_pdf, "application/pdf")
    pieces, _ = streamed(api, model, page_message(three_page_pdf, "application/pdf"))
    assert len(pieces) == 3 and "".join(pieces) == expected
    assert [piece.strip().split()[1] for piece in pieces] == ["one", "two", "three"]  # "Page one of three"...
    whole = api.chat.completions.create(model=model, messages=page_message(three_page_pdf, "application/pdf"))
    assert whole.choices[0].message.content == expected
    assert [page["page_number"] for page in whole.model_extra["pages"]] == [1, 2, 3]


def test_refusals_come_as_the_sdk_expects_them(service_url, client, invoice_png):
    api = sdk(service_url)
    model = api.models.list().data[0].id
    with pytest.raises(openai.NotFoundError) as unknown:
        api.chat.completions.create(model="gpt-4o", messages=page_message(invoice_png))
    assert unknown.value.code == "model_not_found" and "GET /v1/models" in unknown.value.message
    remote = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
    with pytest.raises(openai.BadRequestError) as fetched:
        api.chat.completions.create(model=model, messages=remote)
    assert fetched.value.code == "unsupported_image_url" and fetched.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as two:
        api.chat.completions.create(model=model, messages=page_message(invoice_png) + page_message(invoice_png))
    assert two.value.code == "too_many_files"
    corrupt = client.post("/v1/chat/completions", json={"model": model, "messages": page_message(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)})
    check_error(corrupt, 422, "corrupt_image")  # the Preprocessor's own refusal, as /v1/ocr gives it
    assert corrupt.json()["error"]["type"] == "invalid_request_error"


def test_a_small_hostile_chat_body_is_refused_at_once_while_the_replica_answers(service_url, client, invoice_png):
    """Issue 37.1: 0.4 MB of integers in `messages` took 3.1 s of the event loop and made a 21.7 MB error."""
    body = b'{"model": "x", "messages": [' + b",".join([b"0"] * 200_000) + b"]}"
    assert 390_000 < len(body) < 410_000
    health: list[float] = []

    def probe_health(stop: float) -> None:
        while time.monotonic() < stop:
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            health.append(time.monotonic() - started)
            time.sleep(0.02)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        prober = pool.submit(probe_health, time.monotonic() + 1.5)
        started = time.monotonic()
        answers = list(pool.map(lambda _: client.post("/v1/chat/completions", content=body,
                                                      headers={"Content-Type": "application/json"}), range(3)))
        took = time.monotonic() - started
        prober.result()
    for answer in answers:
        check_error(answer, 400, "request_too_large")
        assert len(answer.content) < 2048
    assert took < 1.0, took
    assert health and max(health) < 0.2, health
    # Under the JSON cap but a pydantic error per element: one problem named, never the list.
    many = client.post("/v1/chat/completions", json={"model": "x", "messages": [0] * 5000})
    check_error(many, 400, "malformed_request")
    assert len(many.content) < 2048 and "messages" in many.json()["error"]["message"]


def test_logit_bias_past_its_cap_is_refused(service_url, client, invoice_png):
    """Issue 37.2: each entry costs the vlm engine a step per token; 100,000 stalled a shared batch."""
    model = sdk(service_url).models.list().data[0].id
    for entries, code in ((100_000, "request_too_large"), (301, "malformed_request")):
        answer = client.post("/v1/chat/completions", json={"model": model, "messages": page_message(invoice_png),
                                                             "logit_bias": {str(i): 1.0 for i in range(entries)}})
        check_error(answer, 400, code)
        assert "logit_bias" in answer.json()["error"]["message"] or entries == 100_000
    fine = client.post("/v1/chat/completions", json={"model": model, "messages": page_message(invoice_png),
                                                     "logit_bias": {str(i): 1.0 for i in range(300)}})
    assert fine.status_code == 200, fine.text


# -- the `vlm` engine: the request's generation knobs, and static batches -------------------------

@pytest.fixture(scope="module")
def vlm_qwen(service_url, tmp_path_factory):
    """A `vlm` app of the tiny Qwen2.5-VL, batching 8 pages, capped at VLM_CAP tokens a page."""
    from ray import serve

    from app.ops.weights import write_manifest
    from app.serve.builder import build_app
    from app.serve.deploy import deploy
    from app.tools.tiny_vlm import build_qwen2_5_vl

    model_dir = build_qwen2_5_vl(tmp_path_factory.mktemp("openai") / "tiny-qwen")
    write_manifest(model_dir)
    args = {"engine": "vlm", "model_dir": str(model_dir), "engine_threads": 1, "ocr_replicas": 1, "ocr_num_cpus": 1,
            "orientation": "off", "vlm": {"max_new_tokens": VLM_CAP, "dtype": "float32"},
            "batching": {"max_batch_size": 8, "batch_wait_timeout_s": 0.3}}
    deploy(build_app(args), name="openai-vlm", route_prefix="/openai-vlm", timeout_s=240)
    yield f"{service_url}/openai-vlm", model_dir
    serve.delete("openai-vlm")


def page(i: int) -> bytes:
    return png_bytes(render_text_page([f"Chat page {i}", "0123456789"], width=240 + 24 * i))


def test_the_vlm_engine_honours_max_min_tokens_and_a_loop_is_cut_beside_pages_that_finish(vlm_qwen, client):
    url, model_dir = vlm_qwen
    api = sdk(url)
    model = api.models.list().data[0].id
    whole = api.chat.completions.create(model=model, messages=page_message(page(0)))
    assert whole.choices[0].message.content == ocr_text(client, url, page(0))
    capped = api.chat.completions.create(model=model, messages=page_message(page(0)), max_tokens=8)
    assert 0 < capped.usage.completion_tokens <= 8 < whole.usage.completion_tokens
    exact = api.chat.completions.create(model=model, messages=page_message(page(1)), max_tokens=40,
                                        extra_body={"min_tokens": 40, "ignore_eos": True})
    assert exact.usage.completion_tokens == 40 and exact.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as over:
        api.chat.completions.create(model=model, messages=page_message(page(0)), max_tokens=VLM_CAP + 1)
    assert over.value.code == "max_tokens_too_large"

    from transformers import AutoTokenizer

    token = AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids("a")

    def ask(i: int):
        if i == 0:  # one page driven into a loop: the same token, over and over
            return api.chat.completions.create(model=model, messages=page_message(page(i)), max_tokens=200,
                                               logit_bias={str(token): 100}, extra_body={"min_tokens": 100})
        return api.chat.completions.create(model=model, messages=page_message(page(i)), max_tokens=24)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        looped, *neighbours = pool.map(ask, range(4))
    [notes] = looped.model_extra["pages"]
    assert looped.choices[0].finish_reason == "degenerate" and notes["valid"] is False
    assert notes["generated_tokens"] <= 32 + 16, "the guard stops a looping page within one look"
    for answer in neighbours:
        assert answer.choices[0].finish_reason in ("stop", "length") and answer.usage.completion_tokens > 0


def forced(api: openai.OpenAI, model: str, tokens: int, started: float) -> tuple[int, float]:
    answer = api.chat.completions.create(model=model, messages=page_message(page(tokens % 5)), max_tokens=tokens,
                                         extra_body={"min_tokens": tokens, "ignore_eos": True})
    assert answer.usage.completion_tokens == tokens
    return tokens, time.perf_counter() - started


def head_of_line(url: str) -> dict:
    """One page forced to 256 tokens and seven to 16, sent together: when each finished."""
    api = sdk(url)
    model = api.models.list().data[0].id
    forced(api, model, 4, time.perf_counter())  # warm
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda tokens: forced(api, model, tokens, started), [256] + [16] * 7))
    long = done[0][1]
    shorts = sorted(seconds for _, seconds in done[1:])
    return {"long_s": long, "short_s": shorts}


def test_static_batches_hold_short_pages_behind_a_long_one(vlm_qwen):
    """The `vlm` engine's batch runs as long as its longest page: short pages batched with the long
    one come back with it. (The `vllm` engine passes the opposite test: tests/test_vllm_service.py.)"""
    url, _ = vlm_qwen
    timings = head_of_line(url)
    print("vlm head of line:", timings)
    waited = [seconds for seconds in timings["short_s"] if seconds >= 0.8 * timings["long_s"]]
    assert len(waited) >= 4, timings
