"""One page pipeline (app/pipeline/page_pipeline.py) for requests and jobs: a page whose OCR replica dies
mid-page is sent again under the one retry rule, and both a request and a job end correct."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from app.synthetic import png_bytes, render_text_page


@pytest.fixture(scope="module")
def dying(service_url, tmp_path_factory):
    """An application whose toy OCR replicas die on the page that finds `die` in their folder."""
    from ray import serve

    from app.serve.builder import build_app
    from app.serve.deploy import deploy

    folder = tmp_path_factory.mktemp("die")
    store = Path(tempfile.mkdtemp(prefix="ocr-dying-jobs-")) / "jobs.sqlite3"
    args = {"engine": "tests.toy_engine:ToyEngine", "engine_threads": 1, "ocr_replicas": 2, "ocr_num_cpus": 0.2,
            "engine_options": {"label": "toy-d", "delay_s": 0.05, "max_side": 400, "die_when": str(folder / "die")},
            "jobs": {"store": f"sqlite:///{store}", "lease_s": 3}}
    deploy(build_app(args), name="dying", route_prefix="/dying", timeout_s=240)
    yield f"{service_url}/dying", folder / "die"
    serve.delete("dying")


def ocr_replicas_running() -> int:
    from ray import serve

    status = serve.status().applications["dying"].deployments["OCRModel"]
    return status.replica_states.get("RUNNING", 0)


def test_a_page_whose_ocr_replica_dies_is_read_again_in_a_request_and_in_a_job(dying, client):
    url, die = dying
    image = render_text_page(["Page of a replica that dies"], width=400)
    expected = f"toy-d 400x{image.size[1]}"

    die.touch()
    response = client.post(f"{url}/v1/ocr", files={"file": ("p.png", png_bytes(image), "image/png")})
    assert not die.exists(), "no OCR replica took the page that kills it"
    assert response.status_code == 200, response.text
    assert response.json()["pages"][0]["text"] == expected

    deadline = time.monotonic() + 60
    while ocr_replicas_running() < 2 and time.monotonic() < deadline:  # Serve replaces the dead replica
        time.sleep(0.5)
    die.touch()
    job = client.post(f"{url}/v1/jobs", files={"file": ("p.png", png_bytes(image), "image/png")}).json()
    deadline = time.monotonic() + 120
    while (status := client.get(f"{url}/v1/jobs/{job['id']}").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert not die.exists(), "no OCR replica took the job's page that kills it"
    assert status["status"] == "succeeded" and status["pages"] == {"total": 1, "done": 1, "failed": 0}, status
    result = client.get(f"{url}/v1/jobs/{job['id']}/result").json()
    assert result["pages"][0]["text"] == expected


# -- the one fan-out of a document's pages, and the one retry loop (no Ray) --

def test_page_tasks_bound_what_is_in_flight_raise_the_first_failure_and_cancel_the_rest_on_leaving():
    import asyncio

    from app.pipeline.page_tasks import PageTasks

    async def scenario():
        running, most, cancelled = 0, 0, []

        async def page(number: int, seconds: float, fails: bool = False):
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                await asyncio.sleep(seconds)
                if fails:
                    raise ValueError(f"page {number}")
                return number
            except asyncio.CancelledError:
                cancelled.append(number)
                raise
            finally:
                running -= 1

        with PageTasks(limit=2) as pages:
            for number in range(1, 6):
                await pages.start(page(number, 0.01))
            assert await pages.results() == [1, 2, 3, 4, 5]
        assert most == 2  # never more than the limit at once

        with pytest.raises(ValueError, match="page 2"):
            with PageTasks() as pages:
                await pages.start(page(1, 30))
                await pages.start(page(2, 0.01, fails=True))
                await pages.start(page(3, 30))
                await pages.results()  # raises as soon as page 2 fails, not after 30 s
        await asyncio.sleep(0)
        assert sorted(cancelled) == [1, 3]  # leaving the document cancelled the pages still in flight

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_the_one_retry_loop_takes_a_first_failure_already_had_and_a_rule_of_its_own():
    import asyncio

    from ray.exceptions import ActorDiedError

    from app.errors import BadRequest, InsufficientStorage
    from app.pipeline.retry import retry_page

    calls, retried = [], []

    async def lost():
        calls.append(1)
        raise ActorDiedError()

    # A first attempt already failed retryably: `retries` more calls, each after a backoff, then the last error.
    with pytest.raises(ActorDiedError):
        asyncio.run(retry_page(lost, retries=2, what="t", base_s=0, failed=ActorDiedError(),
                               on_retry=lambda: retried.append(1)))
    assert (len(calls), len(retried)) == (2, 2)
    calls.clear()
    with pytest.raises(BadRequest):  # a first failure that is no use retrying: no call at all
        asyncio.run(retry_page(lost, retries=2, what="t", base_s=0, failed=BadRequest("bad page")))
    assert calls == []

    # A rule of the caller's: the store's blinks are retried, a full store is not.
    def not_full(exc):
        return not isinstance(exc, InsufficientStorage)

    outcomes = [OSError("blink"), OSError("blink"), "kept"]

    async def store():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert asyncio.run(retry_page(store, retries=5, what="t", base_s=0, retryable=not_full)) == "kept"
    outcomes[:] = [InsufficientStorage("full"), "never"]
    with pytest.raises(InsufficientStorage):
        asyncio.run(retry_page(store, retries=5, what="t", base_s=0, retryable=not_full))
    assert outcomes == ["never"]
