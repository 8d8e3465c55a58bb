"""The job store contract, run against both stores: SQLite on disk and a real redis-server."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid

import pytest
import redis

from app.config import Jobs, Settings
from app.jobs.model import Job
from app.jobs.sqlite_schema import ADDED_COLUMNS, SCHEMA
from app.jobs.stores import open_store
from app.errors import InsufficientStorage, QuotaExceeded
from app.jobs.quotas import Admission
from app.jobs.redis_store import RedisJobStore
from app.settings.jobs import JobQuotas
from app.jobs.store import DocumentLost
from app.testkit.redis_server import redis_server
from app.testkit.tmpfs import small_tmpfs


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
    old_schema = SCHEMA
    for name, kind in ADDED_COLUMNS.items():
        old_schema = old_schema.replace(f", {name} {kind}", "")
    old_schema = old_schema.replace("CREATE INDEX IF NOT EXISTS jobs_by_client ON jobs (client, status);", "")
    assert "orientation" not in old_schema and "stored_bytes" not in old_schema
    sqlite3.connect(path).executescript(old_schema)
    store = open_store(Jobs.model_validate({"store": f"sqlite:///{path}"}))
    job, _ = store.create(dataclasses.replace(new_job(), orientation="off"), b"doc", admission=ADMISSION)
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


def test_a_document_kept_for_a_searchable_pdf_outlives_the_job_until_it_expires_and_stays_counted(store):
    kept = new_job(pages=[1])
    kept.keep_document = True
    kept, _ = store.create(kept, b"d" * 600)
    store.claim("runner-a", 30)
    assert store.finish(kept.id, "runner-a", "succeeded", ttl_s=1)
    assert store.get(kept.id).keep_document and store.document(kept.id) == b"d" * 600
    # what it holds still counts against the client's stored bytes
    with pytest.raises(QuotaExceeded, match="max_stored_bytes=1000"):
        store.create(new_job(pages=[1]), b"d" * 500, admission=limits(max_stored_bytes=1000))
    time.sleep(2.2)
    store.purge_expired()
    assert store.get(kept.id) is None and store.document(kept.id) is None
    store.create(new_job(pages=[1]), b"d" * 500, admission=limits(max_stored_bytes=1000))


def test_pages_are_told_in_the_order_they_were_recorded_each_once(store):
    job, _ = store.create(new_job(pages=[1, 2, 3, 4]), b"doc")
    for number in (3, 1, 3, 4):
        store.record_page(job.id, number, result={"text": str(number)})
    store.record_page(job.id, 2, error={"code": "ocr_failed"})
    told = [(3, True), (1, True), (4, True), (2, False)]
    assert store.recorded_order(job.id) == told
    store.finish(job.id, None, "partial", ttl_s=60)
    assert store.recorded_order(job.id) == told
    store.delete(job.id)
    assert store.recorded_order(job.id) == []


def test_a_finished_jobs_callback_is_due_once_held_by_one_runner_and_retried_when_told(store):
    called = new_job(pages=[1])
    called.callback_url = "https://records.internal/ocr-done"
    called, _ = store.create(called, b"doc")
    quiet, _ = store.create(new_job(pages=[1]), b"doc")
    assert store.claim_callback(30) is None  # not finished: nothing to tell yet
    assert store.get(called.id).callback is None
    for job in (called, quiet):
        store.finish(job.id, None, "succeeded", ttl_s=60)
    due = store.claim_callback(30)
    assert due.id == called.id and due.callback == {"status": "pending", "attempts": 0}
    assert store.claim_callback(30) is None  # held by the runner that took it
    store.record_callback(called.id, {"status": "pending", "attempts": 1, "last_status": 500}, due=time.time() - 1)
    again = store.claim_callback(30)
    assert again.id == called.id and again.callback["attempts"] == 1
    store.record_callback(called.id, {"status": "delivered", "attempts": 2, "last_status": 204}, due=None)
    assert store.claim_callback(30) is None and store.get(called.id).callback["status"] == "delivered"
    assert store.get(quiet.id).callback is None and store.get(quiet.id).callback_url is None


def test_a_callback_recorded_after_the_jobs_deletion_leaves_it_deleted(store):
    """Issue 37.8: Redis's HSET made the deleted job's key again, with no TTL: kept for ever."""
    job = new_job(pages=[1])
    job.callback_url = "https://records.internal/ocr-done"
    job, _ = store.create(job, b"doc")
    store.finish(job.id, None, "succeeded", ttl_s=60)
    assert store.claim_callback(30).id == job.id
    assert store.delete(job.id)  # while its delivery is under way
    store.record_callback(job.id, {"status": "pending", "attempts": 1, "last_status": 500}, due=time.time() - 1)
    assert store.get(job.id) is None and store.claim_callback(30) is None
    if hasattr(store, "_redis"):
        assert store._redis.keys(f"*{job.id}*") == []


def test_a_jobs_decoder_time_is_kept_in_the_store_for_the_next_runner(store):
    """Issue 37.6: the budget lived in one runner's memory and started again when another took the job."""
    job, _ = store.create(new_job(pages=[1, 2]), b"doc")
    assert store.charge_decode(job.id, 0.0) == 0.0
    store.charge_decode(job.id, 1500.0)
    assert store.charge_decode(job.id, 250.5) == pytest.approx(1750.5)
    assert store.charge_decode(job.id, 0.0) == pytest.approx(1750.5)  # what a runner taking over reads
    assert store.delete(job.id)
    assert store.charge_decode(job.id, 10.0) == 0.0 and store.get(job.id) is None  # not made again


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

    with pytest.raises(ValidationError, match="sqlite:///ABSOLUTE/PATH, rediss://"):
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


ADMISSION = Admission(JobQuotas(), max_store_bytes=10**12)


def limits(**quotas) -> Admission:
    return Admission(JobQuotas(**quotas), max_store_bytes=10**12)


def test_claims_take_turns_between_clients(store):
    backlog = [store.create(new_job(client="alice"), b"doc")[0] for _ in range(3)]
    time.sleep(0.01)
    small, _ = store.create(new_job(pages=[1], client="bob"), b"doc")
    first = store.claim("runner", 30)
    assert first.id == backlog[0].id  # nobody served yet: the oldest job
    store.release(first.id, "runner")  # the end of its turn
    assert store.claim("runner", 30).id == small.id  # bob's turn before alice's second one
    assert store.claim("runner", 30).id == backlog[0].id  # then alice again, her oldest unfinished job first


def test_a_submit_past_a_quota_is_refused_and_names_it(store):
    two_jobs = limits(max_queued_jobs=2, max_queued_pages=5, max_stored_bytes=1000)
    first, _ = store.create(new_job(client="alice", pages=[1, 2]), b"d" * 100, admission=two_jobs)
    second, _ = store.create(new_job(client="alice", pages=[1, 2]), b"d" * 100, admission=two_jobs)
    with pytest.raises(QuotaExceeded, match="jobs.quotas.max_queued_jobs=2") as refused:
        store.create(new_job(client="alice", pages=[1]), b"d", admission=two_jobs)
    assert refused.value.status == 429 and refused.value.retry_after_s
    assert store.create(new_job(client="bob", pages=[1]), b"d", admission=two_jobs)[1]  # another client's own
    assert store.finish(first.id, None, "succeeded", ttl_s=60)  # one job fewer unfinished; its document goes
    with pytest.raises(QuotaExceeded, match="holds 2 pages in unfinished jobs; .*max_queued_pages=5"):
        store.create(new_job(client="alice", pages=[1, 2, 3, 4]), b"d", admission=two_jobs)
    other, _ = store.create(new_job(client="alice", pages=[1]), b"d" * 100, admission=two_jobs)
    store.delete(other.id)
    store.record_page(second.id, 1, result={"text": "t" * 700})  # results count: 100 + ~713 bytes, then 250 more
    with pytest.raises(QuotaExceeded, match="max_stored_bytes=1000"):
        store.create(new_job(client="alice", pages=[1]), b"d" * 250, admission=limits(max_stored_bytes=1000))


def test_concurrent_submits_neither_pass_a_quota_nor_split_an_idempotency_key(store):
    from concurrent.futures import ThreadPoolExecutor

    three = limits(max_queued_jobs=3)

    def submit(_):
        try:
            return store.create(new_job(client="carol"), b"doc", admission=three)[1]
        except QuotaExceeded:
            return None

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(submit, range(8)))
        assert outcomes.count(True) == 3 and outcomes.count(None) == 5
        same_key = list(pool.map(lambda _: store.create(new_job(client="dave"), b"doc", "one-key"), range(8)))
    assert len({job.id for job, _ in same_key}) == 1 and sum(created for _, created in same_key) == 1


def test_the_store_cap_refuses_with_507(store):
    with pytest.raises(InsufficientStorage, match="jobs.max_store_bytes=1"):
        store.create(new_job(), b"doc", admission=Admission(JobQuotas(), max_store_bytes=1))
    assert store.unfinished_counts() == {"queued": 0, "running": 0}


def test_unfinished_jobs_fail_past_their_age_limit(store):
    old, _ = store.create(new_job(), b"doc")
    time.sleep(1.1)
    young, _ = store.create(new_job(), b"doc")
    assert store.expire_unfinished(max_age_s=1.0, ttl_s=60) == 1
    expired = store.get(old.id)
    assert expired.status == "failed" and expired.error["code"] == "job_expired"
    assert store.get(young.id).status == "queued"


def test_a_lost_document_is_told_apart_from_a_deleted_job(store):
    job, _ = store.create(new_job(), bytes(range(256)) * 5000)
    if isinstance(store, RedisJobStore):
        store._redis.delete(f"ocrjobs:doc:{job.id}:1")  # as an evicting Redis would
    else:
        store._transaction(lambda db: db.execute("DELETE FROM documents WHERE job_id=?", (job.id,)))
    with pytest.raises(DocumentLost):
        store.document(job.id)
    store.delete(job.id)
    assert store.document(job.id) is None


def test_redis_with_an_evicting_policy_is_refused():
    with redis_server() as url:
        redis.Redis.from_url(url).config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(RuntimeError, match="maxmemory-policy allkeys-lru"):
            open_store(Jobs.model_validate({"store": url}))


def test_redis_at_its_maxmemory_is_507_and_takes_jobs_again_when_freed():
    with redis_server() as url:
        store = open_store(Jobs.model_validate({"store": url}))
        first, _ = store.create(new_job(), b"x" * 300_000)
        store._redis.config_set("maxmemory", str(int(store._redis.info("memory")["used_memory"]) + 100_000))
        with pytest.raises(InsufficientStorage, match="maxmemory"):
            store.create(new_job(), b"y" * 400_000, admission=ADMISSION)
        store.delete(first.id)
        assert store.create(new_job(), b"y" * 150_000, admission=ADMISSION)[1]


def test_a_full_disk_is_507_and_the_sqlite_store_works_again_once_space_is_freed():
    with small_tmpfs(4 * 1024 * 1024) as directory:
        store = open_store(Jobs.model_validate({"store": f"sqlite:///{directory}/jobs.sqlite3"}))
        job, _ = store.create(new_job(), b"doc")
        for name in ("jobs.sqlite3", "jobs.sqlite3-wal", "jobs.sqlite3-shm"):  # strangers' documents
            assert os.stat(f"{directory}/{name}").st_mode & 0o777 == 0o600, name
        with open(f"{directory}/filler", "wb") as filler:  # another tenant of the disk fills it
            with pytest.raises(OSError):
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        with pytest.raises(InsufficientStorage, match="min_free_bytes=0 would no longer be free"):
            store.create(new_job(), os.urandom(300_000), admission=ADMISSION)
        with pytest.raises(InsufficientStorage, match="no space left"):  # past the admission check: SQLite's own
            store.create(new_job(), os.urandom(300_000))
        with pytest.raises(InsufficientStorage):
            store.record_page(job.id, 1, result={"text": "t" * 300_000})
        assert store.get(job.id).status == "queued"  # reads go on
        os.remove(f"{directory}/filler")
        assert store.create(new_job(), os.urandom(300_000), admission=ADMISSION)[1]  # no transaction left open
        assert store.record_page(job.id, 1, result={"text": "t"})
        store.close()


def test_a_sqlite_submit_that_would_eat_the_free_space_floor_is_507():
    with small_tmpfs(8 * 1024 * 1024) as directory:
        store = open_store(Jobs.model_validate({"store": f"sqlite:///{directory}/jobs.sqlite3"}))
        floor = Admission(JobQuotas(), max_store_bytes=10**12, min_free_bytes=4 * 1024 * 1024)
        accepted = []
        with pytest.raises(InsufficientStorage, match="min_free_bytes"):
            for _ in range(20):
                accepted.append(store.create(new_job(), os.urandom(500_000), admission=floor)[0])
        assert 2 <= len(accepted) < 8
        for job in accepted:
            store.delete(job.id)  # the floor left room for the deletes
        assert store.create(new_job(), os.urandom(500_000), admission=floor)[1]  # freed pages count as free
        store.close()
