-- The load of one round of `lineagec bench serve` as wrk drives it (wrk.go
-- writes the constants above this line: DATA, THREADS, GUARD, QUANTILES, MARK).
--
-- DATA holds the round's requests, one a line: the agent's number, method,
-- path, Authorization header ("" for none) and body ("" for none), separated
-- by tabs. Thread `id` (set by setup) drives the agents whose number modulo
-- THREADS is id, each agent's requests in the file's order.
--
-- Ordering: wrk asks delay() and then request() whenever one of the thread's
-- connections is free, without saying which connection. delay() reserves an
-- agent for the request() that follows it: the next agent, round robin over
-- the thread's agents, that has a request left and, for the guard (GUARD),
-- none in flight. The guard's answer names its request ("request_id":
-- "a<agent>-<k>"), and response() frees that agent. So each of the guard's
-- agents has at most one request in flight and they reach the server in
-- order, as the builtin load sends them; which connection carries them is
-- not fixed. OPA's decisions change no state: its agents are not held, and
-- their requests go out in order but may overlap. A connection that finds
-- no agent to drive idles till the end; the thread stops once every request
-- of its agents is answered, so a round ends at the duration or when its
-- decisions run out, as with the builtin load.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } lineage_timespec;
int clock_gettime(int clock, lineage_timespec *ts);
]]
local ts = ffi.new("lineage_timespec")
local function now_us() -- CLOCK_MONOTONIC: the same clock in every thread and process
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

local PARK = 3600 * 1000 -- ms: a connection with nothing to send waits out the round

-- The thread's state, globals so that done() can read them (thread:get).
first_us, last_us, answered, no_verdict, non_2xx = 0, 0, 0, 0, {}

local agents, byagent, reserved = {}, {}, {}
local rr, left, inflight = 1, 0, 0

function init(args)
  for line in io.lines(DATA) do
    local n, method, path, auth, body = line:match("^(%d+)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
    n = tonumber(n)
    if n % THREADS == id then
      local a = byagent[n]
      if not a then
        a = { reqs = {}, k = 1, busy = false }
        byagent[n] = a
        agents[#agents + 1] = a
      end
      local h = {}
      if auth ~= "" then h["Authorization"] = auth end
      if body ~= "" then h["Content-Type"] = "application/json" else body = nil end
      a.reqs[#a.reqs + 1] = wrk.format(method, path, h, body)
      left = left + 1
    end
  end
end

function delay()
  local n = #agents
  for _ = 1, n do
    local a = agents[rr]
    rr = rr % n + 1
    if not a.busy and a.k <= #a.reqs then
      a.busy = GUARD
      reserved[#reserved + 1] = a
      return 0
    end
  end
  return PARK
end

function request()
  local a = table.remove(reserved)
  if not a then -- wrk checks the script's request once before it connects
    return agents[1] and agents[1].reqs[1] or wrk.format()
  end
  local r = a.reqs[a.k]
  a.k = a.k + 1
  left = left - 1
  inflight = inflight + 1
  if first_us == 0 then first_us = now_us() end
  return r
end

function response(status, headers, body)
  inflight = inflight - 1
  answered = answered + 1
  last_us = now_us()
  if status < 200 or status > 299 then
    non_2xx[tostring(status)] = (non_2xx[tostring(status)] or 0) + 1
  end
  if GUARD then
    local n = body:match('"request_id":"a(%d+)%-')
    local a = n and byagent[tonumber(n)]
    if a then a.busy = false else no_verdict = no_verdict + 1 end
  elseif not body:find('"result"', 1, true) then
    no_verdict = no_verdict + 1
  end
  if left == 0 and inflight == 0 then wrk.thread:stop() end
end

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  threads[#threads + 1] = thread
end

function done(summary, latency, requests)
  local first, last, nv, byCode, codes = 0, 0, 0, {}, {}
  for _, t in ipairs(threads) do
    local f, l = t:get("first_us"), t:get("last_us")
    if f > 0 and (first == 0 or f < first) then first = f end
    if l > last then last = l end
    nv = nv + t:get("no_verdict")
    for code, c in pairs(t:get("non_2xx")) do byCode[code] = (byCode[code] or 0) + c end
  end
  for code, c in pairs(byCode) do codes[#codes + 1] = string.format('"%s":%d', code, c) end
  local q = {}
  for i = 1, QUANTILES do q[i] = string.format("%.0f", latency:percentile((i - 0.5) * 100 / QUANTILES)) end
  local e = summary.errors
  io.write(MARK, string.format(
    '{"requests":%d,"duration_us":%d,"first_us":%.0f,"last_us":%.0f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d,"non_2xx":{%s},"no_verdict":%d},' ..
    '"p50_us":%.0f,"p99_us":%.0f,"quantiles_us":[%s]}\n',
    summary.requests, summary.duration, first, last,
    e.connect, e.read, e.write, e.timeout, e.status, table.concat(codes, ","), nv,
    latency:percentile(50), latency:percentile(99), table.concat(q, ",")))
end
