"""The fleet's store: one Redis (AOF on), reached from every node.

Keys, under `ocrjobs:`: `job:ID` (a hash), `doc:ID:N` (the document in 1 MiB chunks),
`results:ID` and `errors:ID` (page number -> JSON), `idem:CLIENT:KEY`, and `queue` (unfinished
job ids by creation time). Every change that reads before it writes is one Lua script, so
it is atomic on the server; leases are timed by the server's clock, so nodes whose clocks
drift cannot steal each other's jobs. A finished job's keys get the job's TTL and expire
by themselves; its document is dropped at once.
"""

from __future__ import annotations

import json
from typing import Optional

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from app.jobs.model import Job
from app.jobs.store import JobStore

PREFIX = "ocrjobs:"
CHUNK_BYTES = 1024 * 1024
_FIELDS = ("status", "client", "content_type", "filename", "document_sha256", "pages", "created_at", "started_at",
           "finished_at", "expires_at", "error", "engine", "owner", "lease_until", "orientation")

# KEYS: queue. ARGV: owner, lease_s, prefix. The oldest unfinished job with a free or lapsed lease.
_CLAIM = """
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, 499)) do
  local key = ARGV[3] .. 'job:' .. id
  local s = redis.call('HMGET', key, 'status', 'lease_until')
  if not s[1] then
    redis.call('ZREM', KEYS[1], id)
  elseif (s[1] == 'queued' or s[1] == 'running') and tonumber(s[2] or '0') < now then
    redis.call('HSET', key, 'owner', ARGV[1], 'lease_until', tostring(now + tonumber(ARGV[2])), 'status', 'running')
    if (redis.call('HGET', key, 'started_at') or '') == '' then redis.call('HSET', key, 'started_at', tostring(now)) end
    return id
  end
end
return false
"""
# KEYS: queue. ARGV: prefix. {queued, running} over the unfinished jobs, in one round trip.
_COUNT = """
local queued, running = 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local s = redis.call('HGET', ARGV[1] .. 'job:' .. id, 'status')
  if s == 'queued' then queued = queued + 1 elseif s == 'running' then running = running + 1 end
end
return {queued, running}
"""
# KEYS: job. ARGV: owner, lease_s.
_RENEW = """
local s = redis.call('HMGET', KEYS[1], 'status', 'owner')
if s[1] ~= 'running' or s[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'lease_until', tostring(tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[2])))
return 1
"""
_RELEASE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then redis.call('HSET', KEYS[1], 'lease_until', '0', 'owner', '') end
return 1
"""
# KEYS: job, results, errors. ARGV: page, 'result'|'error', body.
_RECORD = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
if ARGV[2] == 'result' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) else redis.call('HSET', KEYS[3], ARGV[1], ARGV[3]) end
return 1
"""
# KEYS: job, results, errors, queue. ARGV: owner ('' = anyone), status, ttl_s, error, engine, id, prefix.
_FINISH = """
local s = redis.call('HMGET', KEYS[1], 'status', 'owner', 'doc_chunks', 'idem_key')
if s[1] ~= 'queued' and s[1] ~= 'running' then return 0 end
if ARGV[1] ~= '' and s[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local ttl = math.ceil(tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'finished_at', tostring(now), 'expires_at', tostring(now + ttl),
           'error', ARGV[4], 'engine', ARGV[5], 'owner', '', 'lease_until', '0')
for n = 0, tonumber(s[3] or '0') - 1 do redis.call('DEL', ARGV[7] .. 'doc:' .. ARGV[6] .. ':' .. n) end
redis.call('ZREM', KEYS[4], ARGV[6])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
if s[4] and s[4] ~= '' then redis.call('EXPIRE', s[4], ttl) end
return 1
"""


class RedisJobStore(JobStore):
    def __init__(self, url: str, password_file: Optional[str] = None, require_aof: bool = True):
        password = None
        if password_file:
            with open(password_file) as handle:
                password = handle.read().strip()
        self._redis = redis.Redis.from_url(
            url, password=password, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30,
            retry=Retry(ExponentialBackoff(cap=2.0), 5), retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        if require_aof and str(self._redis.info("persistence").get("aof_enabled")) != "1":
            raise RuntimeError("The Redis at jobs.store has appendonly off: a restart of it would lose accepted jobs. "
                               "Start it with --appendonly yes (or set jobs.require_aof: false).")
        self._claim, self._renew, self._release, self._record, self._finish, self._count = (
            self._redis.register_script(source) for source in (_CLAIM, _RENEW, _RELEASE, _RECORD, _FINISH, _COUNT))

    @staticmethod
    def _key(kind: str, job_id: str) -> str:
        return f"{PREFIX}{kind}:{job_id}"

    def create(self, job: Job, document: bytes, idempotency_key: Optional[str] = None) -> tuple[Job, bool]:
        idem = f"{PREFIX}idem:{job.client}:{idempotency_key}" if idempotency_key else ""
        if idem and not self._redis.set(idem, job.id, nx=True):
            existing = self.get(self._redis.get(idem).decode())
            if existing is not None:
                return existing, False
            self._redis.set(idem, job.id)  # the key's job expired or was deleted: this one takes it
        chunks = [document[i:i + CHUNK_BYTES] for i in range(0, len(document), CHUNK_BYTES)] or [b""]
        fields = {name: _encode(getattr(job, name)) for name in _FIELDS}
        fields.update(doc_chunks=str(len(chunks)), idem_key=idem)
        pipe = self._redis.pipeline(transaction=True)
        for n, chunk in enumerate(chunks):
            pipe.set(f"{PREFIX}doc:{job.id}:{n}", chunk)
        pipe.hset(self._key("job", job.id), mapping=fields)
        pipe.zadd(f"{PREFIX}queue", {job.id: job.created_at})  # last: a runner never sees a job without its document
        pipe.execute()
        return self.get(job.id), True

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
        job_id = self._claim(keys=[f"{PREFIX}queue"], args=[owner, lease_s, PREFIX])
        return self.get(job_id.decode()) if job_id else None

    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        return self._renew(keys=[self._key("job", job_id)], args=[owner, lease_s]) == 1

    def release(self, job_id: str, owner: str) -> None:
        self._release(keys=[self._key("job", job_id)], args=[owner])

    def document(self, job_id: str) -> Optional[bytes]:
        chunks = self._redis.hget(self._key("job", job_id), "doc_chunks")
        if chunks is None:
            return None
        parts = self._redis.mget([f"{PREFIX}doc:{job_id}:{n}" for n in range(int(chunks))])
        return None if any(part is None for part in parts) else b"".join(parts)

    def record_page(self, job_id: str, page_number: int, result: Optional[dict] = None,
                    error: Optional[dict] = None) -> bool:
        kind, body = ("result", result) if result is not None else ("error", error)
        keys = [self._key("job", job_id), self._key("results", job_id), self._key("errors", job_id)]
        return self._record(keys=keys, args=[page_number, kind, json.dumps(body, separators=(",", ":"))]) == 1

    def recorded_pages(self, job_id: str) -> set[int]:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hkeys(self._key("results", job_id))
        pipe.hkeys(self._key("errors", job_id))
        return {int(number) for numbers in pipe.execute() for number in numbers}

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
        args = [owner or "", status, ttl_s, _encode(error), _encode(engine), job_id, PREFIX]
        return self._finish(keys=keys, args=args) == 1

    def delete(self, job_id: str) -> bool:
        chunks, idem = self._redis.hmget(self._key("job", job_id), ["doc_chunks", "idem_key"])
        keys = [self._key(kind, job_id) for kind in ("job", "results", "errors")]
        keys += [f"{PREFIX}doc:{job_id}:{n}" for n in range(int(chunks or 0))]
        if idem:
            keys.append(idem.decode())
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(*keys)
        pipe.zrem(f"{PREFIX}queue", job_id)
        existed, _ = pipe.execute()
        return existed > 0

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
    if name in ("pages", "error", "engine"):
        return json.loads(text) if text else ([] if name == "pages" else None)
    if name in ("created_at", "started_at", "finished_at", "expires_at", "lease_until"):
        return float(text) if text else (0.0 if name == "lease_until" else None)
    return text or None if name in ("content_type", "filename", "owner", "orientation") else text


