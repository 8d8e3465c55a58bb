"""Every route of the API with a bad request: what tests/test_error_boundary.py and test_auth.py walk."""

from __future__ import annotations

FIELDS = {"code", "message", "retryable", "request_id"}
OPENAI_FIELDS = {"type", "param"}  # beside them on the OpenAI-compatible routes, as OpenAI clients read them


def bad_requests(big_bytes: int) -> list[tuple[str, str, dict, int, str]]:
    """(method, path, httpx keyword arguments, expected status, expected code) for each route."""
    png = {"file": ("x.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png")}
    return [
        ("POST", "/v1/ocr", {}, 400, "empty_file"),  # no file at all
        ("POST", "/v1/ocr", {"files": png}, 422, "corrupt_image"),  # a PNG that is not one
        ("POST", "/v1/ocr", {"content": b"x" * big_bytes, "headers": {"content-type": "image/png"}}, 413,
         "upload_too_large"),
        ("GET", "/v1/ocr", {}, 405, "method_not_allowed"),
        ("POST", "/v1/jobs", {}, 400, "empty_file"),
        ("GET", "/v1/jobs/no-such-job", {}, 404, "job_not_found"),
        ("GET", "/v1/jobs/no-such-job/result", {}, 404, "job_not_found"),
        ("DELETE", "/v1/jobs/no-such-job", {}, 404, "job_not_found"),
        ("PUT", "/v1/jobs/no-such-job", {}, 405, "method_not_allowed"),
        ("POST", "/v1/info", {}, 405, "method_not_allowed"),
        ("POST", "/v1/chat/completions", {"content": b"{not json", "headers": {"content-type": "application/json"}},
         400, "malformed_request"),
        ("POST", "/v1/chat/completions", {"json": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}},
         400, "missing_file"),
        ("POST", "/v1/chat/completions", {"content": b"[" * 60_000, "headers": {"content-type": "application/json"}},
         400, "malformed_request"),  # nested past Python's recursion limit, within the JSON cap
        ("POST", "/v1/chat/completions", {"content": b"[" * 100_000, "headers": {"content-type": "application/json"}},
         400, "request_too_large"),  # past the 64 KiB cap on the JSON around the document
        ("POST", "/v1/chat/completions", {"json": {"model": "m", "messages": ["not a message", 7]}},
         400, "malformed_request"),
        ("POST", "/v1/chat/completions", {"content": b"x" * (2 * big_bytes), "headers": {"content-type": "application/json"}},
         413, "upload_too_large"),
        ("GET", "/v1/chat/completions", {}, 405, "method_not_allowed"),
        ("POST", "/v1/models", {}, 405, "method_not_allowed"),
        ("POST", "/healthz", {}, 405, "method_not_allowed"),
        ("POST", "/readyz", {}, 405, "method_not_allowed"),
        ("GET", "/v2/nothing-here", {}, 404, "not_found"),
    ]


def check_error(response, status: int, code: str) -> None:
    what = f"{response.request.method} {response.request.url.path}"
    assert response.status_code == status, (what, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), what
    body = response.json()
    extra = OPENAI_FIELDS if "/v1/chat/" in what and set(body.get("error", {})) > FIELDS else set()
    assert set(body) >= {"error"} and set(body["error"]) == FIELDS | extra, (what, body)
    error = body["error"]
    assert error["code"] == code and isinstance(error["retryable"], bool) and error["message"], (what, body)
    assert error["request_id"] and error["request_id"] == response.headers.get("x-request-id"), (what, body)
