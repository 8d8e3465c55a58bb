"""The fuzzer's cases for the doors opened last round (issue 37.9): `/v1/chat/completions` with malformed
JSON, deep nesting, huge arrays, bad data: URLs and every knob at its edges; and, for jobs that were
accepted, their results in every format and their event streams (load/soak_scenarios.py `follow_jobs`).

Each case is named for what it is (`chat/knob-max_tokens=-1#17`), so a failure replays with its seed.
"""

from __future__ import annotations

import base64
import json
import random

from load.fuzz import Case

RESULT_FORMATS = ("json", "markdown", "hocr", "alto", "pdf")
CHAT = "/v1/chat/completions"


def _data_url(document: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(document).decode()}"


MODEL = {"id": "rapidocr"}  # the served model's id; chat_abuse sets it, so that cases get past the model check


def _chat(image_url, **knobs) -> dict:
    content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": "Read it."}]
    return {"model": MODEL["id"], "messages": [{"role": "user", "content": content}], **knobs}


def _json_case(name: str, body, **case) -> Case:
    raw = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    return Case(f"chat/{name}", raw, "application/json", path=CHAT, **case)


def _malformed(rng: random.Random, docs: dict) -> Case:
    bodies = [b"", b"{", b'{"model": ', b"\xff\xfe\x00", b"[]", b"null", b'"text"', b"1e999999", b'{"model": 1}',
              b'{"model": "x", "messages": "hello"}', b'{"model": "x", "messages": []}', b"{" * 5000,
              b'{"a":' * 20000 + b"1" + b"}" * 20000]
    body = rng.choice(bodies)
    return _json_case(f"malformed-{body[:12]!r}", body)


def _huge(rng: random.Random, docs: dict) -> Case:
    url = _data_url(docs["png"])
    choice = rng.randrange(5)
    if choice == 0:
        return _json_case("messages-200k-integers", b'{"model": "x", "messages": [' + b",".join([b"0"] * 200_000)
                          + b"]}")
    if choice == 1:
        return _json_case("deep-nesting", b'{"model": "x", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    if choice == 2:
        body = _chat(url)
        body["messages"][0]["content"] = [{"type": "text", "text": "x"}] * 20_000
        return _json_case("parts-20k", body)
    if choice == 3:
        return _json_case("logit-bias-100k", _chat(url, logit_bias={str(i): 1.0 for i in range(100_000)}))
    return _json_case("text-1mb", _chat(url, messages=[{"role": "user", "content": "x" * 1_000_000}]))


def _bad_url(rng: random.Random, docs: dict) -> Case:
    urls = ["data:image/png;base64,!!!!", "data:;base64,", "data:image/png,notbase64", "https://example.com/a.png",
            "file:///etc/passwd", "data:image/png;base64," + "A" * 3, "data:image/png;base64,",
            _data_url(b"\x89PNG\r\n\x1a\n" + b"\0" * 64), _data_url(docs["pdf"][:200], "application/pdf"),
            "data:" + "x" * 5000 + ";base64,AAAA", _data_url(docs["png"], "text/html")]
    url = rng.choice(urls)
    body = _chat(url) if rng.random() < 0.8 else _chat({"url": url, "detail": "high"})
    return _json_case(f"data-url-{url[:24]!r}", body)


KNOBS = {
    "max_tokens": [0, -1, 1, 2**63, "abc", None, 1.5],
    "max_completion_tokens": [0, 10**12, "1"],
    "min_tokens": [-1, 10**9, "x"],
    "n": [0, 2, 10**9, None],
    "temperature": [float("nan"), -1, 1e308],
    "logit_bias": [{"abc": 1}, {"1": 1e308}, {"1": "NaN"}, {"-5": -100}, [], "x"],
    "stream": [True, "yes", None],
    "stream_options": [{"include_usage": True}, "x", {"include_usage": "maybe"}],
    "model": ["", "x" * 10_000, None, 7],
    "ignore_eos": [True, "no"],
}


def _knob(rng: random.Random, docs: dict) -> Case:
    name = rng.choice(sorted(KNOBS))
    value = rng.choice(KNOBS[name])
    return _json_case(f"knob-{name}={str(value)[:16]}", _chat(_data_url(docs["png"]), **{name: value}))


def _roles(rng: random.Random, docs: dict) -> Case:
    url = _data_url(docs["png"])
    shapes = [
        [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}] * 2}],
        [{"role": "user", "content": None}],
        [{"content": [{"type": "image_url", "image_url": {"url": url}}]}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": 7}]}],
        [0, "x", None],
    ]
    shape = rng.randrange(len(shapes))
    return _json_case(f"messages-shape-{shape}", {"model": MODEL["id"], "messages": shapes[shape]})


def _method(rng: random.Random, docs: dict) -> Case:
    method = rng.choice(["GET", "PUT", "DELETE"])
    return Case(f"chat/method-{method}", b"", None, method=method, path=CHAT)


def _good(rng: random.Random, docs: dict) -> Case:
    kind = rng.choice(["png", "pdf"])
    media = "application/pdf" if kind == "pdf" else "image/png"
    return _json_case(f"good-{kind}-stream={kind == 'pdf'}", _chat(_data_url(docs[kind], media), stream=kind == "pdf"))


CHAT_CASES = (_malformed, _huge, _bad_url, _knob, _knob, _roles, _method, _good)


def chat_abuse(rng: random.Random, docs: dict, model: str) -> Case:
    MODEL["id"] = model
    return rng.choice(CHAT_CASES)(rng, docs)
