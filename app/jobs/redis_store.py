"""The fleet's store: one Redis (AOF on), reached from every node.

Keys, under `ocrjobs:`: `job:ID` (a hash), `doc:ID:N` (the document in 1 MiB chunks),
`results:ID` and `errors:ID` (page number -> JSON), `order:ID` (`PAGE:result|error` as recorded),
`idem:CLIENT:KEY`, `queue` (unfinished job ids by creation time), `cqueue:CLIENT` (the same, per
client), `cjobs:CLIENT` (a client's jobs, finished ones until they expire: its quota usage) and
`turns` (client -> time of its last claim). Every change that reads before it writes is one Lua script, so it is atomic on
the server: the submit checks the Idempotency-Key and the client's quotas and creates the job
in one step. Leases are timed by the server's clock, so nodes whose clocks drift cannot steal
each other's jobs. A finished job's keys get the job's TTL and expire by themselves; its
document is dropped at once.

Redis must not evict (`maxmemory-policy noeviction`, checked at start): an evicted chunk
would lose an accepted document. A Redis at its maxmemory answers OOM: that is 507.
"""

from __future__ import annotations

import json
from typing import Optional

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from app.jobs import redis_scripts as scripts
from app.jobs.model import CALLBACK_PENDING, Job
from app.jobs.quotas import QUOTA_NAMES, Admission, quota_exceeded, store_full
from app.jobs.store import DocumentLost, JobStore

PREFIX = "ocrjobs:"
CHUNK_BYTES = 1024 * 1024
ORPHAN_CHUNK_TTL_S = 3600  # chunks written for a submit that never became a job
_FIELDS = ("status", "client", "content_type", "filename", "document_sha256", "pages", "created_at", "started_at",
           "finished_at", "expires_at", "error", "engine", "owner", "lease_until", "orientation", "keep_document",
           "callback_url", "callback", "lang", "structure", "pdf_text")



class RedisJobStore(JobStore):
    def __init__(self, url: str, password_file: Optional[str] = None, require_aof: bool = True,
                 ca_file: Optional[str] = None):
        password = None
        if password_file:
            with open(password_file) as handle:
                password = handle.read().strip()
        tls = {}
        if url.startswith("rediss://"):  # the server's certificate is checked against ca_file, hostname included
            tls = {"ssl_cert_reqs": "required", "ssl_check_hostname": True, "ssl_ca_certs": ca_file}
        self._redis = redis.Redis.from_url(
            url, password=password, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30,
            retry=Retry(ExponentialBackoff(cap=2.0), 5), retry_on_error=[redis.ConnectionError, redis.TimeoutError],
            **tls)
        if require_aof and str(self._redis.info("persistence").get("aof_enabled")) != "1":
            raise RuntimeError("The Redis at jobs.store has appendonly off: a restart of it would lose accepted jobs. "
                               "Start it with --appendonly yes (or set jobs.require_aof: false).")
        policy = self._redis.info("memory").get("maxmemory_policy", "noeviction")
        if policy != "noeviction":
            raise RuntimeError(f"The Redis at jobs.store evicts keys (maxmemory-policy {policy}): it would drop "
                               "accepted documents and results. Start it with --maxmemory-policy noeviction.")
        (self._create, self._claim, self._renew, self._release, self._record, self._finish, self._count,
         self._claim_callback, self._record_callback, self._charge_decode) = (
             self._redis.register_script(source) for source in (
                 scripts.CREATE, scripts.CLAIM, scripts.RENEW, scripts.RELEASE, scripts.RECORD, scripts.FINISH,
                 scripts.COUNT, scripts.CLAIM_CALLBACK, scripts.RECORD_CALLBACK, scripts.CHARGE_DECODE))
        self._redis.register_script(scripts.ADOPT)(args=[PREFIX])

    @staticmethod
    def _key(kind: str, job_id: str) -> str:
        return f"{PREFIX}{kind}:{job_id}"

    def create(self, job: Job, document: bytes, idempotency_key: Optional[str] = None,
               admission: Optional[Admission] = None) -> tuple[Job, bool]:
        if admission is not None:
            used = int(self._redis.info("memory").get("used_memory", 0))
            if used + len(document) > admission.max_store_bytes:
                raise store_full(f"jobs.max_store_bytes={admission.max_store_bytes}")
        idem = f"{PREFIX}idem:{job.client}:{idempotency_key}" if idempotency_key else ""
        chunks = [document[i:i + CHUNK_BYTES] for i in range(0, len(document), CHUNK_BYTES)] or [b""]
        fields = {name: _encode(getattr(job, name)) for name in _FIELDS}
        fields.update(doc_chunks=str(len(chunks)), idem_key=idem, page_count=str(len(job.pages)),
                      document_bytes=str(len(document)), stored_bytes=str(len(document)))
        quotas = [admission.limit(name) if admission else 2**53 for name in QUOTA_NAMES]
        try:
            # The chunks first, with a deadline: the script makes them permanent with the job, and chunks of
            # a submit that was refused (or whose writer died) go by themselves.
            pipe = self._redis.pipeline(transaction=False)
            for n, chunk in enumerate(chunks):
                pipe.set(f"{PREFIX}doc:{job.id}:{n}", chunk, ex=ORPHAN_CHUNK_TTL_S)
            pipe.execute()
            outcome = self._create(args=[PREFIX, job.id, idem, job.client, job.created_at, len(job.pages),
                                         len(document), len(chunks), *quotas,
                                         *[item for pair in fields.items() for item in pair]])
        except redis.exceptions.OutOfMemoryError as exc:
            raise store_full("the Redis at jobs.store is at its maxmemory") from exc
        kind, value = outcome[0].decode(), outcome[1].decode()
        if kind != "created":
            self._redis.delete(*[f"{PREFIX}doc:{job.id}:{n}" for n in range(len(chunks))])
        if kind == "quota":
            raise quota_exceeded(job.client, value, int(outcome[2]), admission)
        return self.get(value), kind == "created"

    def get(self, job_id: str) -> Optional[Job]:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hmget(self._key("job", job_id), _FIELDS)
        pipe.hlen(self._key("results", job_id))
        pipe.hlen(self._key("errors", job_id))
        values, done, failed = pipe.execute()
        if values[0] is None:
            return None
        job = Job(id=job_id, **{name: _decode(name, value) for name, value in zip(_FIELDS, values)})
        job.done, job.failed = done, failed
        return job

    def claim(self, owner: str, lease_s: float) -> Optional[Job]:
        job_id = self._claim(args=[owner, lease_s, PREFIX])
        return self.get(job_id.decode()) if job_id else None

    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        return self._renew(keys=[self._key("job", job_id)], args=[owner, lease_s]) == 1

    def release(self, job_id: str, owner: str) -> None:
        self._release(keys=[self._key("job", job_id)], args=[owner])

    def charge_decode(self, job_id: str, ms: float) -> float:
        return float(self._charge_decode(keys=[self._key("job", job_id)], args=[repr(float(ms))]))

    def document_size(self, job_id: str) -> Optional[int]:
        chunks, size = self._redis.hmget(self._key("job", job_id), ["doc_chunks", "document_bytes"])
        return int(size) if chunks is not None and size and int(size) > 0 else None

    def document(self, job_id: str) -> Optional[bytes]:
        chunks = self._redis.hget(self._key("job", job_id), "doc_chunks")
        if chunks is None:
            return None
        parts = self._redis.mget([f"{PREFIX}doc:{job_id}:{n}" for n in range(int(chunks))])
        if any(part is None for part in parts):
            if self._redis.hget(self._key("job", job_id), "status") in (b"queued", b"running"):
                raise DocumentLost(job_id)
            return None
        return b"".join(parts)

    def record_page(self, job_id: str, page_number: int, result: Optional[dict] = None,
                    error: Optional[dict] = None) -> bool:
        kind, body = ("result", result) if result is not None else ("error", error)
        keys = [self._key(kind, job_id) for kind in ("job", "results", "errors", "order")]
        try:
            return self._record(keys=keys, args=[page_number, kind, json.dumps(body, separators=(",", ":"))]) == 1
        except redis.exceptions.OutOfMemoryError as exc:
            raise store_full("the Redis at jobs.store is at its maxmemory") from exc

    def recorded_pages(self, job_id: str) -> set[int]:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hkeys(self._key("results", job_id))
        pipe.hkeys(self._key("errors", job_id))
        return {int(number) for numbers in pipe.execute() for number in numbers}

    def recorded_order(self, job_id: str) -> list[tuple[int, bool]]:
        entries = [entry.decode().split(":") for entry in self._redis.lrange(self._key("order", job_id), 0, -1)]
        return [(int(number), kind == "result") for number, kind in entries]

    def results(self, job_id: str) -> dict[int, dict]:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hgetall(self._key("results", job_id))
        pipe.hgetall(self._key("errors", job_id))
        done, failed = pipe.execute()
        results = {int(number): {"error": json.loads(body)} for number, body in failed.items()}
        results.update({int(number): {"result": json.loads(body)} for number, body in done.items()})
        return results

    def finish(self, job_id: str, owner: Optional[str], status: str, ttl_s: float, error: Optional[dict] = None,
               engine: Optional[dict] = None) -> bool:
        keys = [self._key(kind, job_id) for kind in ("job", "results", "errors")] + [f"{PREFIX}queue"]
        args = [owner or "", status, ttl_s, _encode(error), _encode(engine), job_id, PREFIX, _encode(CALLBACK_PENDING)]
        return self._finish(keys=keys, args=args) == 1

    def claim_callback(self, hold_s: float) -> Optional[Job]:
        for _ in range(10):  # a due entry whose job expired meanwhile is dropped, and the next one taken
            job_id = self._claim_callback(keys=[f"{PREFIX}callbacks"], args=[hold_s])
            if job_id is None:
                return None
            job = self.get(job_id.decode())
            if job is not None:
                return job
            self._redis.zrem(f"{PREFIX}callbacks", job_id)
        return None

    def record_callback(self, job_id: str, state: dict, due: Optional[float]) -> None:
        self._record_callback(keys=[self._key("job", job_id), f"{PREFIX}callbacks"],
                              args=[job_id, _encode(state), "" if due is None else repr(due)])

    def delete(self, job_id: str) -> bool:
        chunks, idem, client = self._redis.hmget(self._key("job", job_id), ["doc_chunks", "idem_key", "client"])
        keys = [self._key(kind, job_id) for kind in ("job", "results", "errors", "order")]
        keys += [f"{PREFIX}doc:{job_id}:{n}" for n in range(int(chunks or 0))]
        if idem:
            keys.append(idem.decode())
        pipe = self._redis.pipeline(transaction=False)  # MULTI is refused at maxmemory; a delete must work there
        pipe.delete(*keys)
        pipe.zrem(f"{PREFIX}queue", job_id)
        pipe.zrem(f"{PREFIX}callbacks", job_id)
        if client:
            pipe.zrem(f"{PREFIX}cqueue:{client.decode()}", job_id)
            pipe.zrem(f"{PREFIX}cjobs:{client.decode()}", job_id)
        existed = pipe.execute()[0]
        return existed > 0

    def unfinished_created_before(self, cutoff: float) -> list[str]:
        return [job_id.decode() for job_id in self._redis.zrangebyscore(f"{PREFIX}queue", "-inf", f"({cutoff}")]

    def unfinished_counts(self) -> dict[str, int]:
        counts = self._count(keys=[f"{PREFIX}queue"], args=[PREFIX])
        return {"queued": int(counts[0]), "running": int(counts[1])}

    def purge_expired(self) -> int:
        return 0  # finished jobs carry a TTL on every key: Redis deletes them itself

    def ping(self) -> None:
        self._redis.ping()

    def close(self) -> None:
        self._redis.close()


def _encode(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _decode(name: str, raw: Optional[bytes]):
    text = raw.decode() if raw is not None else ""
    if name in ("pages", "error", "engine", "callback"):
        return json.loads(text) if text else ([] if name == "pages" else None)
    if name in ("created_at", "started_at", "finished_at", "expires_at", "lease_until"):
        return float(text) if text else (0.0 if name == "lease_until" else None)
    if name == "keep_document":
        return text == "True"
    return text or None if name in ("content_type", "filename", "owner", "orientation", "callback_url", "lang",
                                   "structure", "pdf_text") else text


