-- wrk reporter for scripts/bench and scripts/load: prints the run's figures
-- as one JSON line (latencies in microseconds) after wrk's own summary, so
-- the scripts need not parse wrk's human-readable units.
--
-- WRK_PACE_MS=N paces each connection: it waits a random 0.5N to 1.5N ms
-- before each request (wrk's `delay`, not counted in the latency), so many
-- clients scrape at a steady rate instead of back to back.
local pace = tonumber(os.getenv("WRK_PACE_MS") or "")

if pace and pace > 0 then
  init = function(args)
    math.randomseed(os.time() + math.floor(os.clock() * 1e6))
  end
  delay = function()
    return math.floor(pace * (0.5 + math.random()))
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors_connect":%d,"errors_read":%d,"errors_write":%d,' ..
    '"errors_status":%d,"errors_timeout":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,' ..
    '"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
