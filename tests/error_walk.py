"""Every route of the API with a bad request: what tests/test_error_boundary.py and test_auth.py walk."""

from __future__ import annotations

FIELDS = {"code", "message", "retryable", "request_id"}


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
        ("POST", "/healthz", {}, 405, "method_not_allowed"),
        ("POST", "/readyz", {}, 405, "method_not_allowed"),
        ("GET", "/v2/nothing-here", {}, 404, "not_found"),
    ]


def check_error(response, status: int, code: str) -> None:
    what = f"{response.request.method} {response.request.url.path}"
    assert response.status_code == status, (what, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), what
    body = response.json()
    assert set(body) >= {"error"} and set(body["error"]) == FIELDS, (what, body)
    error = body["error"]
    assert error["code"] == code and isinstance(error["retryable"], bool) and error["message"], (what, body)
    assert error["request_id"] and error["request_id"] == response.headers.get("x-request-id"), (what, body)
