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


def test_every_job_failure_is_in_the_taxonomy_and_nothing_builds_an_error_by_hand():
    """A job's and a failed page's `error` come from app/errors.py's classes, as HTTP errors do: no module
    of the service writes an error dict of its own (the decoder's wire frames name a taxonomy class)."""
    import ast
    from pathlib import Path

    from app import errors

    failures = [cls for cls in vars(errors).values()
                if isinstance(cls, type) and issubclass(cls, errors.JobFailure) and cls is not errors.JobFailure]
    codes = [cls.code for cls in failures]
    assert sorted(codes) == ["decode_budget_exceeded", "document_lost", "job_expired", "not_processed",
                             "too_many_failed_pages"]
    for cls in failures:
        assert set(cls("why").record()) == {"code", "message", "retryable"}
    documented = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    assert all(f"`{code}`" in documented for code in codes)

    by_hand = []
    for path in Path(errors.__file__).parent.rglob("*.py"):
        if path.name == "errors.py" and path.parent.name == "app":
            continue  # the taxonomy itself
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and any(isinstance(key, ast.Constant) and key.value == "code"
                                                  for key in node.keys):
                keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
                if "class" not in keys:  # the decoder's frames: {"type": "error", "class": ..., "code": ...}
                    by_hand.append(f"{path.name}:{node.lineno}")
    assert by_hand == [], f"error dicts built by hand: {by_hand}"


def test_every_v1_route_answers_through_the_one_boundary():
    """Each /v1 route of the ingress is wrapped by error_boundary.answering, and none answers an error by
    hand (nor leaves one to FastAPI's handler, after which Starlette raises it again into Serve)."""
    import ast
    import inspect

    from app.http import ingress

    tree = ast.parse(inspect.getsource(ingress))
    routes = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any(d.startswith("api.") and "'/v1/" in d for d in decorators):
                routes[node.name] = (decorators, ast.unparse(node))
    assert len(routes) >= 9
    for name, (decorators, source) in routes.items():
        assert any(d.startswith("error_boundary.answering(") for d in decorators), name
        assert "failed(request" not in source, name  # no error answered by hand
