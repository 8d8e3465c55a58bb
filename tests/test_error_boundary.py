"""One error boundary (app/http/error_boundary.py): every route's refusals have the same four fields,
the request id among them, whatever answered them: a route, FastAPI's validation or routing."""

from __future__ import annotations

from tests.conftest import TEST_LIMITS
from tests.error_walk import bad_requests, check_error


def test_every_route_answers_a_bad_request_with_the_one_error_body(client):
    for method, path, kwargs, status, code in bad_requests(TEST_LIMITS["max_upload_bytes"] + 1):
        check_error(client.request(method, path, **kwargs), status, code)


def test_a_clients_request_id_comes_back_in_the_error_body(client):
    response = client.get("/v1/jobs/nothing", headers={"X-Request-ID": "trace-4711"})
    check_error(response, 404, "job_not_found")
    assert response.json()["error"]["request_id"] == "trace-4711"
