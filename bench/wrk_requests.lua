-- wrk script for bench/ingest.py: signed GitHub webhooks, each with its own
-- X-GitHub-Delivery, so that hookd stores every one (a repeated delivery id
-- would be a 200 duplicate, which is not what is measured).
--
--   wrk -t1 -c64 -d15s -s bench/wrk_requests.lua http://127.0.0.1:PORT/hooks/github \
--       -- POOL_FILE NONCE
--
-- POOL_FILE: one signed body a line, "<hex HMAC-SHA256 of body>\t<json body>",
--            written by bench/ingest.py (the signature covers only the body).
-- NONCE:     8 hex digits, different for every wrk run against one database.
--
-- Every request is pre-formatted at init, once per body, and split around the
-- delivery id; request() only glues in a fresh id:
--   NONCE-TTTT-4000-8000-SSSSSSSSSSSS   (T: wrk thread, S: sequence in that thread)
-- so ids never repeat, across threads (each thread has its own Lua state and
-- its own T) or across runs (NONCE), however long wrk runs.
--
-- done() prints one line "WRK_JSON {...}" with the summary, latency percentiles
-- (microseconds), the status codes seen and how many requests were sent.

local MARK = "@@DELIVERY@@"

local threads = {}
local next_tid = 0

function setup(thread)
   thread:set("tid", next_tid)
   next_tid = next_tid + 1
   table.insert(threads, thread)
end

local heads, tails = {}, {}
local pool_size = 0
local index = 0
local nonce = "00000000"
sent = 0
statuses = {}

function init(args)
   local pool_file = args[1]
   nonce = args[2] or nonce
   if pool_file == nil then
      error("usage: wrk ... -s wrk_requests.lua URL -- POOL_FILE NONCE")
   end
   for line in io.lines(pool_file) do
      local signature, body = line:match("^(%x+)\t(.+)$")
      if signature then
         local raw = wrk.format("POST", nil, {
            ["Content-Type"] = "application/json",
            ["User-Agent"] = "GitHub-Hookshot/hookd-bench",
            ["X-GitHub-Event"] = "issues",
            ["X-GitHub-Delivery"] = MARK,
            ["X-Hub-Signature-256"] = "sha256=" .. signature,
         }, body)
         local first, last = raw:find(MARK, 1, true)
         pool_size = pool_size + 1
         heads[pool_size] = raw:sub(1, first - 1)
         tails[pool_size] = raw:sub(last + 1)
      end
   end
   if pool_size == 0 then
      error("no signed bodies in " .. pool_file)
   end
end

function request()
   index = index % pool_size + 1
   sent = sent + 1
   return heads[index] .. string.format("%s-%04x-4000-8000-%012x", nonce, tid, sent) .. tails[index]
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

local function json_object(t)
   local parts = {}
   for k, v in pairs(t) do
      parts[#parts + 1] = string.format('"%s": %s', tostring(k), tostring(v))
   end
   return "{" .. table.concat(parts, ", ") .. "}"
end

function done(summary, latency, requests)
   local merged, total_sent = {}, 0
   for _, thread in ipairs(threads) do
      total_sent = total_sent + (thread:get("sent") or 0)
      for status, count in pairs(thread:get("statuses") or {}) do
         merged[status] = (merged[status] or 0) + count
      end
   end
   local e = summary.errors
   local out = {
      duration_us = summary.duration,
      requests = summary.requests,
      bytes = summary.bytes,
      sent = total_sent,
      errors = json_object({
         connect = e.connect, read = e.read, write = e.write,
         status = e.status, timeout = e.timeout,
      }),
      statuses = json_object(merged),
      latency_us = json_object({
         mean = string.format("%.1f", latency.mean),
         stdev = string.format("%.1f", latency.stdev),
         min = latency.min,
         max = latency.max,
         p50 = latency:percentile(50),
         p90 = latency:percentile(90),
         p99 = latency:percentile(99),
         p999 = latency:percentile(99.9),
      }),
   }
   io.write("WRK_JSON ", json_object(out), "\n")
end
