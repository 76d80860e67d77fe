-- `interlock.providers.buckets.step`, line for line, run atomically by Redis (a script runs
-- alone). KEYS[1]: the bucket's hash; ARGV: rate, capacity, need, want, force, hold.
-- Times are Redis's own clock, so processes whose clocks disagree still agree.
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local need = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local force = tonumber(ARGV[5])
local hold = tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local stored = redis.call('HMGET', KEYS[1], 'level', 'updated', 'not_before')
local level = tonumber(stored[1])
local updated = tonumber(stored[2])
local not_before = tonumber(stored[3]) or 0
if level == nil or updated == nil then
  level = capacity
  updated = now
end
level = math.min(capacity, level + math.max(0, now - math.max(updated, not_before)) * rate)
level = math.min(capacity, level - force)
if hold > 0 then
  not_before = math.max(not_before, now + hold)
  level = math.min(level, 0)
end
local needed = math.min(need, capacity)
local granted = 0
local wait = 0
if need > 0 then
  if now < not_before then
    wait = not_before - now + math.max(0, needed - level) / rate
  elseif level >= needed then
    granted = math.max(need, math.min(want, level))
    level = level - granted
  else
    wait = (needed - level) / rate
  end
end
redis.call('HSET', KEYS[1], 'level', tostring(level), 'updated', tostring(now),
  'not_before', tostring(not_before))
-- A bucket left alone refills; once it would be full again it is the same as no bucket,
-- so it goes away by itself then.
local idle = math.max(0, not_before - now) + (capacity - level) / rate
redis.call('PEXPIRE', KEYS[1], math.ceil(idle * 1000) + 1000)
return {tostring(granted), tostring(wait)}
