package redislimit

import "github.com/redis/go-redis/v9"

// luaCommon holds the bucket arithmetic the scripts share. It is the Redis
// copy of tenants/limits' token bucket (same refill, resize and wait rules;
// see README.md), on millisecond timestamps.
//
// A scope's hash holds rl/ra/rc (request bucket level, its time, the
// capacity it was computed for) and tl/ta/tc (the token bucket). A missing
// hash is a full bucket, which is what an expired one would have refilled to.
const luaCommon = `
local function now_ms(a)
  local n = tonumber(a)
  if n and n > 0 then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function sync(l, a, oc, c, now, w)
  if c <= 0 then return 0 end
  if l == nil or a == nil or oc == nil then return c end
  if oc > 0 and now > a then l = math.min(oc, l + oc * (now - a) / w) end
  if oc ~= c then
    if oc <= 0 then l = c else l = math.min(c, c - (oc - l)) end
  end
  return l
end

local function load(key, now, w, rpm, tpm)
  local v = redis.call('HMGET', key, 'rl', 'ra', 'rc', 'tl', 'ta', 'tc')
  return {
    r = sync(tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), rpm, now, w),
    t = sync(tonumber(v[4]), tonumber(v[5]), tonumber(v[6]), tpm, now, w),
    rpm = rpm, tpm = tpm,
  }
end

local function store(key, b, now, w)
  if b.rpm <= 0 and b.tpm <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'rl', string.format('%.17g', b.r), 'ra', now, 'rc', b.rpm, 'tl', string.format('%.17g', b.t), 'ta', now, 'tc', b.tpm)
  local ttl = 1000
  if b.rpm > 0 then ttl = math.max(ttl, math.ceil((b.rpm - b.r) / b.rpm * w) + 1000) end
  if b.tpm > 0 then ttl = math.max(ttl, math.ceil((b.tpm - b.t) / b.tpm * w) + 1000) end
  redis.call('PEXPIRE', key, ttl)
end

local function wait(l, n, c, w)
  if l >= n or c <= 0 then return 0 end
  return math.ceil((n - l) / c * w)
end
`

// admitScript admits one request against the key's and the tenant's limits
// atomically: both scopes are charged or neither.
//
// KEYS: tenant hash, key hash, tenant lease set, key lease set.
// ARGV: now ms (0 = the server's TIME), window ms, lease ttl ms, lease id,
// token cost, tenant rpm, tpm, concurrency, key rpm, tpm, concurrency,
// concurrency retry-after ms.
//
// Returns {ok, scope (1 key, 2 tenant), kind (1 concurrency, 2 requests,
// 3 tokens), too large, retry ms, limit, has requests, limit, remaining,
// reset ms, has tokens, limit, remaining, reset ms}.
var admitScript = redis.NewScript(luaCommon + `
local now = now_ms(ARGV[1])
local w, ttl, id, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local tb = load(KEYS[1], now, w, tonumber(ARGV[6]), tonumber(ARGV[7]))
local kb = load(KEYS[2], now, w, tonumber(ARGV[9]), tonumber(ARGV[10]))
local tconc, kconc, cretry = tonumber(ARGV[8]), tonumber(ARGV[11]), tonumber(ARGV[12])

local function inflight(z)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  return redis.call('ZCARD', z)
end

local function check(b, infl, conc)
  if conc > 0 and infl >= conc then return {1, conc, cretry, 0} end
  if b.rpm > 0 and b.r < 1 then return {2, b.rpm, wait(b.r, 1, b.rpm, w), 0} end
  if b.tpm > 0 then
    if cost > b.tpm then return {3, b.tpm, w, 1} end
    if b.t < cost then return {3, b.tpm, wait(b.t, cost, b.tpm, w), 0} end
  end
  return nil
end

local scope = 1
local ref = check(kb, inflight(KEYS[4]), kconc)
if ref == nil then
  scope = 2
  ref = check(tb, inflight(KEYS[3]), tconc)
end
local ok = 0
if ref == nil then
  ok, scope, ref = 1, 0, {0, 0, 0, 0}
  for _, b in ipairs({kb, tb}) do
    if b.rpm > 0 then b.r = b.r - 1 end
    if b.tpm > 0 then b.t = b.t - cost end
  end
  -- Every admitted request holds a lease in both scopes (as the in-process
  -- limiter counts every request in flight), so a concurrency limit set
  -- later counts the requests already running.
  for _, z in ipairs({KEYS[3], KEYS[4]}) do
    redis.call('ZADD', z, now + ttl, id)
    redis.call('PEXPIRE', z, ttl)
  end
end
store(KEYS[1], tb, now, w)
store(KEYS[2], kb, now, w)

local hr, lr, rr, sr, ht, lt, rt, st = 0, 0, 0, 0, 0, 0, 0, 0
for _, b in ipairs({kb, tb}) do
  if b.rpm > 0 then
    local rem = math.floor(math.max(0, b.r))
    if hr == 0 or rem < rr then hr, lr, rr, sr = 1, b.rpm, rem, wait(b.r, b.rpm, b.rpm, w) end
  end
  if b.tpm > 0 then
    local rem = math.floor(math.max(0, b.t))
    if ht == 0 or rem < rt then ht, lt, rt, st = 1, b.tpm, rem, wait(b.t, b.tpm, b.tpm, w) end
  end
end
return {ok, scope, ref[1], ref[4], ref[3], ref[2], hr, lr, rr, sr, ht, lt, rt, st}
`)

// releaseScript ends a lease: its concurrency slots are freed and, when
// the tokens used are known, the token buckets are corrected by delta
// (charged − used; negative goes into debt), capped at capacity.
//
// KEYS: as admitScript. ARGV: now ms, window ms, lease id, known (0/1),
// delta, tenant tpm, key tpm (the admission's, used when a bucket's hash
// expired meanwhile).
var releaseScript = redis.NewScript(luaCommon + `
local now = now_ms(ARGV[1])
local w, id, known, delta = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
if known == 1 and delta ~= 0 then
  for i, key in ipairs({KEYS[1], KEYS[2]}) do
    local v = redis.call('HMGET', key, 'rc', 'tc')
    local rpm, tpm = tonumber(v[1]) or 0, tonumber(v[2]) or tonumber(ARGV[5 + i])
    if tpm > 0 then
      local b = load(key, now, w, rpm, tpm)
      b.t = math.min(tpm, b.t + delta)
      store(key, b, now, w)
    end
  end
end
return 1
`)

// renewScript extends a live lease: KEYS the two lease sets, ARGV now ms
// (0 = TIME), ttl ms, lease id. A lease already expired (or released) is
// not brought back.
var renewScript = redis.NewScript(luaCommon + `
local now = now_ms(ARGV[1])
local ttl, id = tonumber(ARGV[2]), ARGV[3]
local n = 0
for _, z in ipairs(KEYS) do
  local s = redis.call('ZSCORE', z, id)
  if s and tonumber(s) > now then
    redis.call('ZADD', z, 'XX', now + ttl, id)
    redis.call('PEXPIRE', z, ttl)
    n = n + 1
  end
end
return n
`)
