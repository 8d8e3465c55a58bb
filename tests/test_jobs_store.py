"""The job store contract, run against both stores: SQLite on disk and a real redis-server."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
import redis

from app.config import Jobs, Settings
from app.jobs.model import Job
from app.jobs.sqlite_store import _SCHEMA
from app.jobs.store import open_store
from app.testkit.redis_server import redis_server


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/jobs.sqlite3"
    else:
        url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(url).flushdb()
    store = open_store(Jobs.model_validate({"store": url}))
    yield store
    store.close()


def new_job(pages=(1, 2, 3), client="alice") -> Job:
    return Job(id=uuid.uuid4().hex, client=client, pages=list(pages), document_sha256="d" * 64,
               content_type="application/pdf")


def test_create_keeps_document_and_pages(store):
    document = bytes(range(256)) * 9000  # 2.3 MB: more than one Redis chunk
    job, created = store.create(new_job(pages=[2, 5, 9]), document)
    assert created and job.status == "queued" and job.pages == [2, 5, 9] and (job.done, job.failed) == (0, 0)
    assert store.document(job.id) == document
    assert store.get(uuid.uuid4().hex) is None


def test_a_jobs_orientation_is_kept_and_unset_reads_as_none(store):
    turned = dataclasses.replace(new_job(), orientation="270")
    assert store.create(turned, b"doc")[0].orientation == "270"
    assert store.get(turned.id).orientation == "270" and store.claim("runner-a", 30).orientation == "270"
    plain, _ = store.create(new_job(), b"doc")
    assert store.get(plain.id).orientation is None


def test_a_sqlite_store_from_before_orientation_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite3"
    old_schema = _SCHEMA.replace(", orientation TEXT", "")
    assert old_schema != _SCHEMA
    sqlite3.connect(path).executescript(old_schema)
    store = open_store(Jobs.model_validate({"store": f"sqlite:///{path}"}))
    job, _ = store.create(dataclasses.replace(new_job(), orientation="off"), b"doc")
    assert store.get(job.id).orientation == "off"
    store.close()


def test_idempotency_key_returns_the_same_job_per_client(store):
    first, created = store.create(new_job(), b"doc", idempotency_key="key-1")
    again, created_again = store.create(new_job(), b"doc", idempotency_key="key-1")
    other_client, created_other = store.create(new_job(client="bob"), b"doc", idempotency_key="key-1")
    assert created and not created_again and again.id == first.id
    assert created_other and other_client.id != first.id
    store.delete(first.id)
    fresh, created_fresh = store.create(new_job(), b"doc", idempotency_key="key-1")
    assert created_fresh and fresh.id != first.id  # a deleted job frees its key


def test_one_claim_per_job_until_the_lease_lapses(store):
    job, _ = store.create(new_job(), b"doc")
    claimed = store.claim("runner-a", lease_s=1.0)
    assert claimed.id == job.id and claimed.status == "running" and claimed.started_at is not None
    assert store.claim("runner-b", lease_s=1.0) is None  # held
    assert store.renew(job.id, "runner-a", 1.0)
    assert not store.renew(job.id, "runner-b", 1.0)
    time.sleep(1.3)  # runner-a died: its lease lapses
    taken = store.claim("runner-b", lease_s=5.0)
    assert taken.id == job.id
    assert not store.renew(job.id, "runner-a", 1.0)  # the old owner learns it lost the job
    store.release(job.id, "runner-b")
    assert store.claim("runner-c", lease_s=5.0).id == job.id  # a released lease is free at once


def test_claims_go_oldest_first(store):
    older, _ = store.create(new_job(), b"doc")
    time.sleep(0.01)
    store.create(new_job(), b"doc")
    assert store.claim("r", 30).id == older.id


def test_a_page_recorded_twice_counts_once(store):
    job, _ = store.create(new_job(pages=[1, 2, 3]), b"doc")
    assert store.record_page(job.id, 1, result={"text": "one"})
    assert not store.record_page(job.id, 1, result={"text": "one again"})  # a second runner after takeover
    assert not store.record_page(job.id, 1, error={"code": "x"})
    assert store.record_page(job.id, 2, error={"code": "engine_failure", "message": "m", "retryable": False})
    current = store.get(job.id)
    assert (current.done, current.failed) == (1, 1)
    assert store.recorded_pages(job.id) == {1, 2}
    assert store.results(job.id) == {1: {"result": {"text": "one"}},
                                     2: {"error": {"code": "engine_failure", "message": "m", "retryable": False}}}


def test_finish_by_the_lease_holder_only_and_drop_the_document(store):
    job, _ = store.create(new_job(pages=[1]), b"doc")
    store.claim("runner-a", 30)
    assert not store.finish(job.id, "runner-b", "succeeded", ttl_s=60)
    assert store.finish(job.id, "runner-a", "succeeded", ttl_s=60, engine={"name": "ppocr"})
    done = store.get(job.id)
    assert done.status == "succeeded" and done.engine == {"name": "ppocr"}
    assert 59 <= done.expires_at - done.finished_at <= 61
    assert store.document(job.id) is None
    assert not store.record_page(job.id, 1, result={"text": "late"})  # nothing lands after the end
    assert store.claim("runner-c", 30) is None


def test_delete_removes_everything_and_stops_writes(store):
    job, _ = store.create(new_job(), b"doc", idempotency_key="k")
    store.record_page(job.id, 1, result={"text": "t"})
    assert store.delete(job.id)
    assert store.get(job.id) is None and store.document(job.id) is None and store.results(job.id) == {}
    assert not store.record_page(job.id, 2, result={"text": "late"})  # a runner that missed the cancel
    assert store.get(job.id) is None
    assert not store.delete(job.id)


def test_finished_jobs_expire_after_their_ttl(store):
    job, _ = store.create(new_job(pages=[1]), b"doc", idempotency_key="ttl")
    unfinished, _ = store.create(new_job(pages=[1]), b"doc")
    store.record_page(job.id, 1, result={"text": "t"})
    store.finish(job.id, None, "succeeded", ttl_s=1)
    time.sleep(2.2)
    store.purge_expired()
    assert store.get(job.id) is None and store.results(job.id) == {}
    assert store.get(unfinished.id) is not None  # an unfinished job never expires
    again, created = store.create(new_job(pages=[1]), b"doc", idempotency_key="ttl")
    assert created and again.id != job.id


def test_redis_without_aof_is_refused(tmp_path):
    with redis_server() as url:
        redis.Redis.from_url(url).config_set("appendonly", "no")
        with pytest.raises(RuntimeError, match="appendonly"):
            open_store(Jobs.model_validate({"store": url}))


def test_redis_password_comes_from_a_file(tmp_path):
    secret = tmp_path / "redis_password"
    secret.write_text("s3cret-value\n")
    with redis_server(password="s3cret-value") as url:
        with pytest.raises(redis.AuthenticationError):
            open_store(Jobs.model_validate({"store": url}))
        store = open_store(Jobs.model_validate({"store": url, "redis_password_file": str(secret)}))
        job, _ = store.create(new_job(), b"doc")
        assert store.get(job.id).id == job.id


def test_a_store_url_of_another_kind_is_refused_at_validation():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="sqlite:///ABSOLUTE/PATH or redis://"):
        Settings.model_validate({"jobs": {"store": "postgres://db/jobs"}})


def test_unfinished_counts_follow_claims_finishes_and_deletes(store):
    assert store.unfinished_counts() == {"queued": 0, "running": 0}
    jobs = [store.create(new_job(pages=[1]), b"doc")[0] for _ in range(3)]
    assert store.unfinished_counts() == {"queued": 3, "running": 0}
    claimed = store.claim("runner-a", 30)
    assert store.unfinished_counts() == {"queued": 2, "running": 1}
    assert store.finish(claimed.id, "runner-a", "succeeded", ttl_s=60)
    assert store.delete(next(job.id for job in jobs if job.id != claimed.id))
    assert store.unfinished_counts() == {"queued": 1, "running": 0}  # finished and deleted jobs leave it
