-- A run held by a durable wait (a signal, a delay) is listed as 'waiting': it is as live as a
-- running or paused one, so orchestrators looking for runs nobody drives find it by this index.
DROP INDEX IF EXISTS runs_live;
CREATE INDEX runs_live ON runs (lease_expires) WHERE status IN ('running', 'waiting', 'paused');
