"""The `vlm` engine on tiny random-weight checkpoints built here: no GPU, no hub."""

from __future__ import annotations

import concurrent.futures
import io
import shutil
import socket

import numpy as np
import pytest
from PIL import Image

from app.config import Settings
from app.engines import build_engine
from app.engines.repetition import cut_loop, find_loop
from app.synthetic import render_text_page
from app.tools.tiny_vlm import build_got_ocr2, build_qwen2_5_vl
from app.ops.weights import WeightsError, verify, verify_once_per_node, write_manifest
from tests.conftest import png_bytes

MAX_NEW_TOKENS = 12


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("models")
    models = {"got_ocr2": build_got_ocr2(root / "got"), "qwen2_5_vl": build_qwen2_5_vl(root / "qwen")}
    for path in models.values():
        write_manifest(path)
    return models


def engine_for(model_dir, **vlm) -> object:
    settings = Settings(engine="vlm", model_dir=str(model_dir), vlm={"max_new_tokens": MAX_NEW_TOKENS, **vlm})
    engine = build_engine(settings, threads=2)
    engine.load()
    return engine


@pytest.fixture(scope="session")
def engines(tiny_models) -> dict:
    return {family: engine_for(path) for family, path in tiny_models.items()}


def mixed_pages() -> list[np.ndarray]:
    specs = [("alpha", 800, 36), ("beta beta", 420, 24), ("gamma 42 delta", 1300, 48), ("x", 260, 30)]
    return [np.asarray(render_text_page([text], width=width, font_size=size)) for text, width, size in specs]


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield attempts
    assert attempts == []


@pytest.mark.parametrize("family", ["got_ocr2", "qwen2_5_vl"])
def test_loads_and_generates_with_sockets_blocked(tiny_models, family, no_network):
    with pytest.raises(AssertionError):
        socket.create_connection(("127.0.0.1", 9))  # the guard is live
    no_network.clear()
    engine = engine_for(tiny_models[family])
    engine.warmup()
    [result] = engine.infer(mixed_pages()[:1])
    assert result.markdown and result.generated_tokens >= 1
    assert engine.info.version.startswith(family)


@pytest.mark.parametrize("family", ["got_ocr2", "qwen2_5_vl"])
def test_batched_greedy_equals_per_page(engines, family):
    engine = engines[family]
    pages = mixed_pages()
    batched = engine.infer(pages)
    alone = [engine.infer([page])[0] for page in pages]
    assert [r.markdown for r in batched] == [r.markdown for r in alone]
    assert [r.finish_reason for r in batched] == [r.finish_reason for r in alone]
    assert len({r.markdown for r in alone}) > 1, "pages must not all read the same"


def test_batches_are_left_padded(engines):
    family = engines["qwen2_5_vl"]._family
    from PIL import Image

    small, large = Image.new("RGB", (60, 60), "white"), Image.new("RGB", (220, 220), "white")
    inputs = family.inputs([small, large], "Read it.")
    mask = inputs["attention_mask"]
    assert family.tokenizer.padding_side == "left"
    assert mask[0, 0] == 0 and mask[1, 0] == 1  # the shorter prompt is padded at the front
    assert bool(mask[:, -1].all())  # every prompt ends where generation starts
    got = engines["got_ocr2"]._family
    assert got.tokenizer.padding_side == "left"


def test_repetition_guard_on_crafted_outputs():
    assert cut_loop("Total 5.00\n" + "| a | b |\n" * 30) == ("Total 5.00\n| a | b |", True)
    # The repetition already begins at the ". " that ends "Intro.": one copy of it is kept.
    assert cut_loop("Intro. " + "the cat sat on the mat. " * 10) == ("Intro. the cat sat on the mat", True)
    assert cut_loop("A normal page with ten different words in it, no loops.") == (
        "A normal page with ten different words in it, no loops.", False)
    assert find_loop("ab" * 5) is None  # too short to call a loop


def test_guard_marks_looping_and_truncated_pages_invalid(engines):
    engine = engines["got_ocr2"]
    tokenizer = engine._family.tokenizer
    looping = engine._finish(tokenizer.encode("Name: Bob\n" + "TOTAL 1.00 " * 20), max_new_tokens=200)
    assert (looping.valid, looping.finish_reason) == (False, "length")
    assert looping.markdown == "Name: Bob\nTOTAL 1.00" and "repetition" in looping.notes[0]
    stopped = engine._finish(tokenizer.encode("INVOICE 42") + [tokenizer.eos_token_id, 5, 6], max_new_tokens=200)
    assert (stopped.valid, stopped.finish_reason, stopped.markdown) == (True, "stop", "INVOICE 42")
    cut = engine._finish(tokenizer.encode("INVOICE 42 TOTAL"), max_new_tokens=3)
    assert (cut.valid, cut.finish_reason) == (False, "length") and "max_new_tokens" in cut.notes[0]


def test_a_batch_past_its_wall_clock_budget_ends_and_a_wide_logit_bias_costs_one_add(tiny_models):
    """Issue 37.2: a page may hold a shared static batch no longer than vlm.page_timeout_s, and a
    logit bias is one dense add per step (its effect is the same as the entries one by one)."""
    import time

    import torch

    from app.engines.generation_guards import RowLimits
    from app.schemas import Generation

    engine = engine_for(tiny_models["got_ocr2"], max_new_tokens=4000, page_timeout_s=1.0)
    started = time.monotonic()
    results = engine.infer(mixed_pages()[:2], generation=[Generation(max_tokens=4000, ignore_eos=True), None])
    took = time.monotonic() - started
    assert took < 30, took  # 4,000 tokens would take minutes on this CPU
    assert [r.finish_reason for r in results][0] == "timeout" and not results[0].valid
    assert "page_timeout_s" in results[0].notes[0] and 0 < results[0].generated_tokens < 4000
    biases = [{3: 5.0, 17: -2.0, 10**9: 1.0}, {}]  # a token past the vocabulary is ignored
    limits = RowLimits([0, 0], [None, None], biases, prompt_length=0, stop_ids={1}, end_id=1)
    scores = torch.zeros(2, 32)
    out = limits(torch.zeros(2, 1, dtype=torch.long), scores)
    expected = torch.zeros(2, 32)
    expected[0, 3], expected[0, 17] = 5.0, -2.0
    assert torch.equal(out, expected) and torch.equal(scores, torch.zeros(2, 32))  # the input is left alone


def test_generated_tokens_count_up_to_the_end_token_and_never_the_batch_padding(engines):
    """gpu_bench's tokens/s: a page that ended early must not count its row's padding."""
    engine = engines["got_ocr2"]
    tokenizer = engine._family.tokenizer
    text = tokenizer.encode("INVOICE 42")
    stopped = engine._finish(text + [tokenizer.eos_token_id] + [tokenizer.pad_token_id] * 5, max_new_tokens=200)
    assert stopped.generated_tokens == len(text) + 1
    cut = engine._finish(text, max_new_tokens=len(text))
    assert cut.generated_tokens == len(text)
    batched = engine.infer(mixed_pages())
    assert all(0 < r.generated_tokens <= engine._options.max_new_tokens for r in batched)
    assert all(r.generated_tokens == engine._options.max_new_tokens for r in batched if r.finish_reason == "length")


def test_weights_verification_catches_a_flipped_byte_and_a_missing_file(tiny_models, tmp_path):
    model = shutil.copytree(tiny_models["got_ocr2"], tmp_path / "model")
    verify(model, "full")
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    verify(model, "size")  # same size: only the full check can see it
    with pytest.raises(WeightsError, match="corrupted.*model.safetensors"):
        verify(model, "full")
    with pytest.raises(WeightsError, match="model.safetensors"):
        engine_for(model)  # the engine refuses to start
    (model / "tokenizer.json").unlink()
    with pytest.raises(WeightsError, match="missing: tokenizer.json"):
        verify(model, "size")


def test_incomplete_model_directory_names_what_is_missing(tiny_models, tmp_path):
    model = shutil.copytree(tiny_models["qwen2_5_vl"], tmp_path / "model")
    (model / "preprocessor_config.json").unlink()
    (model / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError) as caught:
        engine_for(model, verify_weights="off")
    assert "weights" in str(caught.value) and "preprocessor_config.json" in str(caught.value)
    with pytest.raises(FileNotFoundError, match="directory itself"):
        engine_for(tmp_path / "nowhere", verify_weights="off")


@pytest.fixture(scope="session")
def vlm_url(service_url, tiny_models) -> str:
    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    args = {
        "engine": "vlm", "model_dir": str(tiny_models["got_ocr2"]), "engine_threads": 1,
        "ocr_replicas": 1, "ocr_num_cpus": 0.5, "vlm": {"max_new_tokens": MAX_NEW_TOKENS},
        "batching": {"max_batch_size": 8, "batch_wait_timeout_s": 0.3},
        "debug_keep_engine_inputs": 4,  # what the engine was given: the rotation test reads it
    }
    deploy(build_app(args), name="vlm", route_prefix="/vlm", timeout_s=240)
    return f"{service_url}/vlm"


def test_vlm_graph_over_http_concurrent_equals_one(vlm_url, client, engines):
    image = png_bytes(render_text_page(["VLM page 7"]))

    def post():  # orientation off: the finder's CPU in the one Preprocessor would spread the pages apart
        return client.post(f"{vlm_url}/v1/ocr", params={"orientation": "off"},
                           files={"file": ("p.png", image, "image/png")})

    single = post()
    assert single.status_code == 200, single.text
    body = single.json()
    assert body["engine"]["name"] == "vlm" and body["engine"]["version"].startswith("got_ocr2")
    page = body["pages"][0]
    # The service reads the page as the engine alone reads the same pixels (orientation off, within budget).
    [alone] = engines["got_ocr2"].infer([np.asarray(Image.open(io.BytesIO(image)).convert("RGB"))])
    assert (page["markdown"], page["text"], page["finish_reason"], page["valid"], page["notes"]) == \
           (alone.markdown, alone.markdown, alone.finish_reason, alone.valid, alone.notes)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: post(), range(8)))
    assert all(r.status_code == 200 for r in responses)
    assert {r.json()["pages"][0]["text"] for r in responses} == {page["text"]}
    assert max(r.json()["pages"][0]["batch"]["size"] for r in responses) > 1
    assert client.get(f"{vlm_url}/readyz").json()["replicas"]["OCRModel"] == 1


def test_weights_verification_refuses_a_file_not_in_the_manifest(tiny_models, tmp_path):
    model = shutil.copytree(tiny_models["got_ocr2"], tmp_path / "model")
    verify(model, "full")
    (model / "extra_code.py").write_text("print('not ours')\n")
    with pytest.raises(WeightsError, match="not in the manifest: extra_code.py"):
        verify(model, "size")


def test_replicas_starting_together_on_a_node_hash_the_weights_once(tiny_models, tmp_path):
    import subprocess
    import sys

    model = shutil.copytree(tiny_models["got_ocr2"], tmp_path / "model")
    markers = tmp_path / "markers"
    probe = ("import sys; from app.ops.weights import verify_once_per_node; "
             f"print(verify_once_per_node(sys.argv[1], 'full', {str(markers)!r}))")
    starts = [subprocess.Popen([sys.executable, "-c", probe, str(model)], stdout=subprocess.PIPE, text=True)
              for _ in range(6)]
    hashed = [p.communicate(timeout=120)[0].strip() for p in starts]
    print("6 replicas starting together: hashed", hashed.count("True"), "time(s)")
    assert sorted(hashed) == ["False"] * 5 + ["True"]
    assert verify_once_per_node(model, "full", markers) is False  # a later start: still no hashing
    (model / "tokenizer.json").write_bytes((model / "tokenizer.json").read_bytes())  # a new copy: new mtime
    assert verify_once_per_node(model, "full", markers) is True


@pytest.mark.parametrize("uploaded_at", [90, 180, 270])
def test_vlm_graph_turns_a_rotated_page_upright_before_the_engine(vlm_url, client, uploaded_at):
    """A random model's text says nothing: the assertion is on the pixels the engine was given."""
    from ray import serve

    from app.orientation.geometry import turn

    upright = np.asarray(render_text_page(["INVOICE 4711", "Total amount 57.80 EUR", "Thank you"]).convert("RGB"))
    request_id = f"vlm-turned-{uploaded_at}"
    response = client.post(f"{vlm_url}/v1/ocr", headers={"X-Request-ID": request_id},
                           files={"file": ("p.png", png_bytes(Image.fromarray(turn(upright, uploaded_at))), "image/png")})
    assert response.status_code == 200, response.text
    assert response.json()["pages"][0]["rotation"] == (360 - uploaded_at) % 360
    kept = serve.get_deployment_handle("OCRModel", app_name="vlm").kept_engine_inputs.remote().result()
    [given] = [image for rid, number, image in kept if rid == request_id]
    assert given.shape == upright.shape and np.array_equal(given, upright)
