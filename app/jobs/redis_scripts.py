"""The Redis store's Lua scripts: every change that reads before it writes runs as one of these, atomic on
the server (app/jobs/redis_store.py). Keys are under the prefix the store passes in."""

# ARGV: prefix, id, idempotency key ('' none), client, created_at, pages, bytes, chunks, the three quotas
# (jobs, pages, bytes), then the job's fields. {'exists', id} | {'quota', name, used} | {'created', id}.
CREATE = """
local p, id, idem, client = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if idem ~= '' then
  local existing = redis.call('GET', idem)
  if existing and redis.call('EXISTS', p .. 'job:' .. existing) == 1 then return {'exists', existing} end
end
local cjobs = p .. 'cjobs:' .. client
local jobs, pages, bytes = 0, 0, 0
for _, other in ipairs(redis.call('ZRANGE', cjobs, 0, -1)) do
  local s = redis.call('HMGET', p .. 'job:' .. other, 'status', 'page_count', 'stored_bytes')
  if not s[1] then
    redis.call('ZREM', cjobs, other)
  else
    bytes = bytes + tonumber(s[3] or '0')
    if s[1] == 'queued' or s[1] == 'running' then jobs = jobs + 1; pages = pages + tonumber(s[2] or '0') end
  end
end
if jobs + 1 > tonumber(ARGV[9]) then return {'quota', 'max_queued_jobs', tostring(jobs)} end
if pages + tonumber(ARGV[6]) > tonumber(ARGV[10]) then return {'quota', 'max_queued_pages', tostring(pages)} end
if bytes + tonumber(ARGV[7]) > tonumber(ARGV[11]) then return {'quota', 'max_stored_bytes', tostring(bytes)} end
redis.call('HSET', p .. 'job:' .. id, unpack(ARGV, 12))
for n = 0, tonumber(ARGV[8]) - 1 do redis.call('PERSIST', p .. 'doc:' .. id .. ':' .. n) end
if idem ~= '' then redis.call('SET', idem, id) end
local created = tonumber(ARGV[5])
redis.call('ZADD', cjobs, created, id)
redis.call('ZADD', p .. 'cqueue:' .. client, created, id)
redis.call('ZADD', p .. 'turns', 'NX', 0, client)
redis.call('ZADD', p .. 'queue', created, id)
return {'created', id}
"""
# ARGV: owner, lease_s, prefix. Of the client whose last claim is oldest, its oldest job with a free
# or lapsed lease.
CLAIM = """
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local p = ARGV[3]
for _, client in ipairs(redis.call('ZRANGE', p .. 'turns', 0, -1)) do
  local cqueue = p .. 'cqueue:' .. client
  local ids = redis.call('ZRANGE', cqueue, 0, 199)
  if #ids == 0 then redis.call('ZREM', p .. 'turns', client) end
  for _, id in ipairs(ids) do
    local key = p .. 'job:' .. id
    local s = redis.call('HMGET', key, 'status', 'lease_until')
    if not s[1] or (s[1] ~= 'queued' and s[1] ~= 'running') then
      redis.call('ZREM', cqueue, id)
    elseif tonumber(s[2] or '0') < now then
      redis.call('HSET', key, 'owner', ARGV[1], 'lease_until', tostring(now + tonumber(ARGV[2])), 'status', 'running')
      if (redis.call('HGET', key, 'started_at') or '') == '' then redis.call('HSET', key, 'started_at', tostring(now)) end
      redis.call('ZADD', p .. 'turns', now, client)
      return id
    end
  end
end
return false
"""
# ARGV: prefix. Unfinished jobs of a store written before the per-client queues join them (idempotent).
ADOPT = """
local p = ARGV[1]
local all = redis.call('ZRANGE', p .. 'queue', 0, -1, 'WITHSCORES')
for i = 1, #all, 2 do
  local client = redis.call('HGET', p .. 'job:' .. all[i], 'client')
  if client then
    redis.call('ZADD', p .. 'cqueue:' .. client, 'NX', all[i + 1], all[i])
    redis.call('ZADD', p .. 'cjobs:' .. client, 'NX', all[i + 1], all[i])
    redis.call('ZADD', p .. 'turns', 'NX', 0, client)
  end
end
return 1
"""
# KEYS: queue. ARGV: prefix. {queued, running} over the unfinished jobs, in one round trip.
COUNT = """
local queued, running = 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local s = redis.call('HGET', ARGV[1] .. 'job:' .. id, 'status')
  if s == 'queued' then queued = queued + 1 elseif s == 'running' then running = running + 1 end
end
return {queued, running}
"""
# KEYS: job. ARGV: owner, lease_s.
RENEW = """
local s = redis.call('HMGET', KEYS[1], 'status', 'owner')
if s[1] ~= 'running' or s[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'lease_until', tostring(tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[2])))
return 1
"""
RELEASE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then redis.call('HSET', KEYS[1], 'lease_until', '0', 'owner', '') end
return 1
"""
# KEYS: job, results, errors, order. ARGV: page, 'result'|'error', body.
RECORD = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
if ARGV[2] == 'result' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) else redis.call('HSET', KEYS[3], ARGV[1], ARGV[3]) end
redis.call('HINCRBY', KEYS[1], 'stored_bytes', string.len(ARGV[3]))
redis.call('RPUSH', KEYS[4], ARGV[1] .. ':' .. ARGV[2])
return 1
"""
# KEYS: callbacks. ARGV: hold_s. The first due callback, held hold_s from now (the server's clock).
CLAIM_CALLBACK = """
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return false end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), due[1])
return due[1]
"""
# KEYS: job. ARGV: ms. The job's decoder time after adding ms; a deleted job is not made again.
CHARGE_DECODE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return '0' end
return redis.call('HINCRBYFLOAT', KEYS[1], 'decode_ms', ARGV[1])
"""
# KEYS: job, callbacks. ARGV: id, state, due ('' = no further attempt). A job deleted meanwhile stays
# deleted: HSET on its key would make it again, without its TTL.
RECORD_CALLBACK = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]); return 0 end
redis.call('HSET', KEYS[1], 'callback', ARGV[2])
if ARGV[3] == '' then redis.call('ZREM', KEYS[2], ARGV[1]) else redis.call('ZADD', KEYS[2], tonumber(ARGV[3]), ARGV[1]) end
return 1
"""
# KEYS: job, results, errors, queue. ARGV: owner ('' = anyone), status, ttl_s, error, engine, id, prefix,
# the pending callback state.
FINISH = """
local s = redis.call('HMGET', KEYS[1], 'status', 'owner', 'doc_chunks', 'idem_key', 'client', 'document_bytes',
                     'keep_document', 'callback_url')
if s[1] ~= 'queued' and s[1] ~= 'running' then return 0 end
if ARGV[1] ~= '' and s[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local ttl = math.ceil(tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'finished_at', tostring(now), 'expires_at', tostring(now + ttl),
           'error', ARGV[4], 'engine', ARGV[5], 'owner', '', 'lease_until', '0')
local keep = s[7] == 'True'
for n = 0, tonumber(s[3] or '0') - 1 do
  local chunk = ARGV[7] .. 'doc:' .. ARGV[6] .. ':' .. n
  if keep then redis.call('EXPIRE', chunk, ttl) else redis.call('DEL', chunk) end
end
redis.call('ZREM', KEYS[4], ARGV[6])
redis.call('ZREM', ARGV[7] .. 'cqueue:' .. (s[5] or ''), ARGV[6])
if not keep then
  redis.call('HINCRBY', KEYS[1], 'stored_bytes', -tonumber(s[6] or '0'))
  redis.call('HSET', KEYS[1], 'document_bytes', '0')
end
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
redis.call('EXPIRE', ARGV[7] .. 'order:' .. ARGV[6], ttl)
if s[8] and s[8] ~= '' then
  redis.call('HSET', KEYS[1], 'callback', ARGV[8])
  redis.call('ZADD', ARGV[7] .. 'callbacks', now, ARGV[6])
end
if s[4] and s[4] ~= '' then redis.call('EXPIRE', s[4], ttl) end
return 1
"""
