"""API keys on /v1/* (app/http/auth.py): 401 JSON without a right key, 200 with one, probes stay open.

The HTTP tests use the session's keyed application (tests/conftest.py, `keyed_app`): a second
application of the real graph, under a route prefix, in the session's Ray, with a keys file of its own.
"""

from __future__ import annotations

import pytest

from app.http.auth import KeyFileError, KeyRing, Unauthorized, add_key, digest, parse_key_file


def test_key_file_lines_are_checked():
    entries = parse_key_file(f"# clients\n\nscanner-1:{digest('k1')}\n")
    assert entries == [("scanner-1", bytes.fromhex(digest("k1")))]
    with pytest.raises(KeyFileError, match="line 1: expected NAME:SHA256HEX"):
        parse_key_file("scanner-1:not-a-digest\n")
    with pytest.raises(KeyFileError, match="appears twice"):
        parse_key_file(f"a:{digest('x')}\na:{digest('y')}\n")
    with pytest.raises(KeyFileError, match="holds no keys"):
        parse_key_file("# nobody\n")


def test_keyring_names_the_key_and_refuses_others(tmp_path):
    path = tmp_path / "keys"
    first = add_key(path, "archive")
    second = add_key(path, "frontdesk")
    assert first not in path.read_text() and digest(first) in path.read_text()
    ring = KeyRing(path)
    assert ring.name_of(f"Bearer {first}") == "archive"
    assert ring.name_of(f"bearer {second}") == "frontdesk"
    for header in (None, "", f"Basic {first}", "Bearer ", f"Bearer {first}x", f"Bearer {second[:-1]}"):
        with pytest.raises(Unauthorized):
            ring.name_of(header)
    with pytest.raises(KeyFileError, match="already has a key named 'archive'"):
        add_key(path, "archive")


def test_keyring_picks_up_a_rotated_file_and_keeps_keys_when_the_new_file_is_bad(tmp_path, monkeypatch):
    import os

    import app.http.auth as auth

    monkeypatch.setattr(auth, "RELOAD_CHECK_S", 0.0)
    path = tmp_path / "keys"
    old = add_key(path, "old")
    ring = KeyRing(path)
    path.write_text(f"new:{digest('fresh-key')}\n")
    os.utime(path, ns=(1, 1))  # a different mtime, whatever the clock's resolution
    assert ring.name_of("Bearer fresh-key") == "new"
    with pytest.raises(Unauthorized):
        ring.name_of(f"Bearer {old}")
    path.write_text("garbage\n")
    os.utime(path, ns=(2, 2))
    assert ring.name_of("Bearer fresh-key") == "new"  # a broken file does not lock everyone out


def test_missing_keys_file_fails_at_start(tmp_path):
    with pytest.raises(KeyFileError, match="cannot be read"):
        KeyRing(tmp_path / "absent")


@pytest.fixture(scope="module")
def secured(keyed_app):
    """The session's application with `auth.api_keys_file` set (conftest's keyed_app): (base URL, a valid key)."""
    url, keys, _ = keyed_app
    return url, keys["tests"]


def test_v1_routes_need_a_right_key(secured, client, invoice_png):
    url, key = secured
    files = {"file": ("invoice.png", invoice_png, "image/png")}
    for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"Authorization": f"Basic {key}"}):
        refused = client.post(f"{url}/v1/ocr", files=files, headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.json()["error"]["code"] == "unauthorized"
        assert refused.json()["error"]["retryable"] is False
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert client.get(f"{url}/v1/info").status_code == 401  # every /v1 route, not only /v1/ocr
    accepted = client.post(f"{url}/v1/ocr", files=files, headers={"Authorization": f"Bearer {key}"})
    assert accepted.status_code == 200, accepted.text
    assert "INVOICE 4711" in accepted.json()["text"]


def test_probes_stay_open_and_the_unsecured_app_is_unchanged(secured, client, invoice_png):
    url, _ = secured
    assert client.get(f"{url}/healthz").status_code == 200
    ready = client.get(f"{url}/readyz")
    assert ready.status_code == 200, ready.text  # no key needed, and this app's own four stages count
    assert set(ready.json()["replicas"]) == {"Ingress", "Preprocessor", "OCRModel", "Postprocessor", "JobRunner",
                                             "StructureModel"}
    open_app = client.post("/v1/ocr", files={"file": ("i.png", invoice_png, "image/png")})
    assert open_app.status_code == 200


def test_every_v1_route_refuses_a_missing_key_with_the_one_error_body(secured, client):
    from tests.error_walk import bad_requests, check_error

    url, _ = secured
    v1 = sorted({(method, path) for method, path, *_ in bad_requests(1) if path.startswith("/v1")})
    for method, path in v1:
        check_error(client.request(method, f"{url}{path}"), 401, "unauthorized")


def test_the_openai_sdk_is_refused_with_a_wrong_key_and_served_with_the_right_one(secured, invoice_png):
    import base64

    import openai

    url, key = secured
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(invoice_png).decode()}}]}]
    wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.models.list()
    assert refused.value.status_code == 401 and refused.value.code == "unauthorized"
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="ppocr", messages=messages)
    right = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    answer = right.chat.completions.create(model="ppocr", messages=messages)  # the engine's name is a model id too
    assert "INVOICE 4711" in answer.choices[0].message.content


def test_a_refused_path_is_logged_on_one_line_whatever_it_decodes_to(tmp_path, caplog):
    import asyncio
    import logging

    from app.http.auth import APIKeyMiddleware

    keys = tmp_path / "api_keys"
    add_key(keys, "tests")
    middleware = APIKeyMiddleware(app=None, keyring=lambda: KeyRing(keys))
    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v1/jobs/x\nINFO request 1 from admin: 200\x1b[2K",
             "headers": [], "root_path": ""}  # what Starlette hands over for /v1/jobs/x%0AINFO...%1B%5B2K
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        asyncio.run(middleware(scope, None, send))
    assert sent[0]["status"] == 401
    lines = {record.getMessage() for record in caplog.records if record.getMessage().startswith("refused")}
    (line,) = lines
    assert "\n" not in line and "\x1b" not in line and "\\x0aINFO request 1" in line
