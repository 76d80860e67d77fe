-- name: insert_definition
INSERT INTO definitions (hash, body) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING;

-- name: get_definition
SELECT body FROM definitions WHERE hash = %s;

-- name: insert_run
INSERT INTO runs (run_id, pipeline, topic, definition_hash, source, created_at, status, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, 'running', %s);

-- name: select_runs
SELECT run_id, pipeline, topic, definition_hash, source, created_at, last_seq, status, phase,
       cost_usd, tokens, warnings, updated_at, lease_owner, lease_expires, lease_acquired_at,
       lease_renewed_at, batch_parked, estimated
FROM runs;

-- name: lock_lease
SELECT lease_owner, lease_token, lease_expires FROM runs WHERE run_id = %s FOR UPDATE;

-- name: set_lease
UPDATE runs SET lease_owner = %s, lease_token = %s, lease_expires = %s, lease_acquired_at = %s,
       lease_renewed_at = %s
WHERE run_id = %s;

-- name: take_leases
-- The leases of several runs an orchestrator found free (`unowned_runs`), in one statement:
-- rows are locked in run id order, as appends lock them, and a row another transaction holds
-- is skipped (someone is driving or taking that run); a lease another owner made valid
-- meanwhile is left alone, one of the taker's own is taken again (a retry after a commit
-- whose answer was lost). The taken runs come back as `select_runs` lists them, with the
-- new token last.
WITH free AS (
    SELECT run_id FROM runs
    WHERE run_id = ANY(%(runs)s)
      AND (lease_expires IS NULL OR lease_expires <= %(now)s OR lease_owner = %(owner)s)
    ORDER BY run_id
    FOR UPDATE SKIP LOCKED
)
UPDATE runs SET lease_owner = %(owner)s, lease_token = runs.lease_token + 1,
       lease_expires = %(expires)s, lease_acquired_at = %(now)s, lease_renewed_at = %(now)s
FROM free WHERE runs.run_id = free.run_id
RETURNING runs.run_id, pipeline, topic, definition_hash, source, created_at, last_seq, status,
          phase, cost_usd, tokens, warnings, updated_at, lease_owner, lease_expires,
          lease_acquired_at, lease_renewed_at, batch_parked, estimated, lease_token;

-- name: events_of_runs
SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
WHERE run_id = ANY(%s) ORDER BY run_id, seq;

-- name: renew_lease
UPDATE runs SET lease_expires = %s, lease_renewed_at = %s
WHERE run_id = %s AND lease_owner = %s AND lease_token = %s AND lease_expires > %s;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires = NULL
WHERE run_id = %s AND lease_owner = %s AND lease_token = %s;

-- name: release_live_lease
-- `release_lease` for a run somebody else should take up (a submitted run, one let go at
-- shutdown): announced on `interlock_runs`, which fleet orchestrators listen to.
WITH freed AS (
    UPDATE runs SET lease_owner = NULL, lease_expires = NULL
    WHERE run_id = %s AND lease_owner = %s AND lease_token = %s
    RETURNING run_id
)
SELECT freed.run_id FROM freed, LATERAL (SELECT pg_notify('interlock_runs', freed.run_id)) note;

-- name: commit_order
SELECT pg_advisory_xact_lock(4849676);

-- name: events_since
SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s;

-- name: all_events_after
SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
WHERE id > %s ORDER BY id LIMIT %s;

-- name: find_runs
SELECT run_id FROM runs WHERE run_id >= %s AND run_id < %s ORDER BY run_id LIMIT 10;

-- name: insert_command
-- Orchestrators listening on interlock_commands look at their inbox at once (at commit).
WITH posted AS (
    INSERT INTO commands (run_id, kind, message, by, created_at) VALUES (%s, %s, %s, %s, %s)
    RETURNING id, run_id
)
SELECT posted.id FROM posted, LATERAL (SELECT pg_notify('interlock_commands', posted.run_id)) note;

-- name: pending_commands
SELECT id, run_id, kind, message, by, created_at FROM commands
WHERE run_id = %s AND consumed_at IS NULL ORDER BY id;

-- name: all_pending_commands
SELECT id, run_id, kind, message, by, created_at FROM commands
WHERE consumed_at IS NULL ORDER BY id;

-- name: unowned_runs
-- Round-robin between concurrency keys: the oldest run of each key comes before the second
-- oldest of any, so a key with a long backlog does not crowd out the others.
SELECT run_id FROM (
  SELECT run_id,
         row_number() OVER (PARTITION BY coalesce(slot_key, run_id)
                            ORDER BY created_at, run_id) AS turn
  FROM runs r
  WHERE (lease_expires IS NULL OR lease_expires <= %s)
    AND (status IN ('running', 'waiting', 'paused')
         -- ended, but its driver died before acting on it (final.md, archive): finish that
         OR (status = 'delivered' AND lease_owner IS NOT NULL))
    -- a run waiting for a slot of a key that has none free: nothing to do for it yet
    AND NOT (r.slot_key IS NOT NULL AND NOT r.slot_held AND r.slot_limit IS NOT NULL
             AND (SELECT count(*) FROM runs h
                  WHERE h.slot_key = r.slot_key AND h.slot_held
                    AND h.status IN ('running', 'waiting', 'paused')) >= r.slot_limit)
) AS unowned
ORDER BY turn, random() LIMIT %s;

-- name: get_cursor
SELECT position FROM cursors WHERE name = %s;

-- name: set_cursor
INSERT INTO cursors (name, position) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET position = greatest(cursors.position, excluded.position);

-- name: insert_outbox
INSERT INTO outbox (key, sink, run_id, payload, created_at, next_at)
VALUES (%s, %s, %s, %s::jsonb, %s, %s)
ON CONFLICT (key) DO NOTHING;

-- name: claim_outbox
UPDATE outbox SET claimed_by = %s, claimed_until = %s, attempts = attempts + 1
WHERE key IN (
    SELECT key FROM outbox
    WHERE delivered_at IS NULL AND next_at <= %s AND (claimed_until IS NULL OR claimed_until <= %s)
    ORDER BY created_at, key LIMIT %s
    FOR UPDATE SKIP LOCKED)
RETURNING key, sink, run_id, payload, created_at, attempts;

-- name: settle_outbox
UPDATE outbox SET delivered_at = %s, last_error = %s, next_at = %s, claimed_by = NULL,
       claimed_until = NULL
WHERE key = %s AND claimed_by = %s;

-- name: list_outbox
SELECT key, sink, run_id, payload, created_at, attempts, delivered_at, last_error FROM outbox
WHERE run_id = %s ORDER BY created_at, key;

-- name: insert_run_leased
INSERT INTO runs (run_id, pipeline, topic, definition_hash, source, created_at, status, updated_at,
                  lease_owner, lease_token, lease_expires, lease_acquired_at, lease_renewed_at)
VALUES (%s, %s, %s, %s, %s, %s, 'running', %s, %s, %s, %s, %s, %s);

-- name: get_artifact
SELECT body FROM artifacts WHERE sha256 = %s;

-- name: append_run
-- One round trip per run of a group commit: the lease fence, the summary, the events (numbered
-- after the run's last seq and chained to its last hash), consumed commands, stored outputs,
-- cache index entries and the notification, each applied only when the fence holds. Returns
-- the run's new last seq, or no row (lease lost). `prior` reads the run as the fence will find it: appends to a run are
-- serialised by `commit_order`, taken earlier in the same transaction. Each link is
-- sha256(previous hash, newline, seq, newline, content digest), as `interlock.storage.chain`.
-- Arrays travel in binary format: in text each element is quoted and escaped in Python, which
-- cost more than the rest of the statement's parameters together.
WITH RECURSIVE prior AS (
    SELECT last_seq, coalesce(chain_head, '') AS head FROM runs WHERE run_id = %(run)s
), incoming AS (
    SELECT e.at, e.kind, e.data, e.rule, e.why, e.digest, e.ord
    FROM ROWS FROM (jsonb_to_recordset(%(events)s::jsonb)
                    AS (at float8, kind text, data text, rule text, why text, digest text))
         WITH ORDINALITY AS e (at, kind, data, rule, why, digest, ord)
), links (ord, hash) AS (
    SELECT 0::bigint, prior.head FROM prior
    UNION ALL
    SELECT i.ord, encode(sha256(convert_to(
               links.hash || E'\n' || (prior.last_seq + i.ord)::text || E'\n' || i.digest,
               'UTF8')), 'hex')
    FROM links JOIN incoming i ON i.ord = links.ord + 1 CROSS JOIN prior
), fenced AS (
    UPDATE runs SET last_seq = last_seq + %(n)s, status = %(status)s, phase = %(phase)s,
           cost_usd = %(cost)s, tokens = %(tokens)s, warnings = %(warnings)s,
           updated_at = %(updated)s, batch_parked = %(parked)s,
           estimated = %(estimated)s,
           chain_head = coalesce((SELECT hash FROM links WHERE ord = %(n)s AND ord > 0),
                                 chain_head)
    WHERE run_id = %(run)s AND lease_owner = %(owner)s AND lease_token = %(token)s
      AND lease_expires > %(now)s
    RETURNING last_seq
), inserted AS (
    INSERT INTO events (run_id, seq, at, kind, data, rule, why, hash)
    SELECT %(run)s, fenced.last_seq - %(n)s + i.ord, i.at, i.kind, i.data::jsonb, i.rule, i.why,
           links.hash
    FROM fenced, incoming i JOIN links ON links.ord = i.ord
    ORDER BY i.ord
), consumed AS (
    UPDATE commands SET consumed_at = %(now)s
    WHERE id = ANY(%(consumed)b::bigint[]) AND run_id = %(run)s AND consumed_at IS NULL
      AND EXISTS (SELECT 1 FROM fenced)
), stored AS (
    INSERT INTO artifacts (sha256, size, body, created_at)
    SELECT a.sha256, length(a.body), a.body, %(now)s
    FROM unnest(%(shas)b::text[], %(bodies)b::bytea[]) AS a (sha256, body)
    WHERE EXISTS (SELECT 1 FROM fenced)
    ON CONFLICT (sha256) DO NOTHING
), cached AS (
    -- Completions of cached workers are indexed with them: never one without the other.
    INSERT INTO task_cache
        (fingerprint, run_id, task_id, artifact, sha256, size, value_json, completed_at)
    SELECT c.fingerprint, %(run)s, c.task_id, c.artifact, c.sha256, c.size, c.value_json::jsonb,
           c.completed_at
    FROM jsonb_to_recordset(%(cache)s::jsonb) AS c (fingerprint text, task_id text,
         artifact text, sha256 text, size bigint, value_json text, completed_at float8)
    WHERE EXISTS (SELECT 1 FROM fenced)
    ON CONFLICT DO NOTHING
)
SELECT fenced.last_seq FROM fenced
LEFT JOIN LATERAL (SELECT pg_notify('interlock_events', %(run)s) WHERE %(n)s > 0) note ON true;

-- name: cache_put
INSERT INTO task_cache
    (fingerprint, run_id, task_id, artifact, sha256, size, value_json, completed_at)
VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s)
ON CONFLICT DO NOTHING;

-- name: cache_find
SELECT fingerprint, run_id, task_id, artifact, sha256, size, value_json::text, completed_at
FROM task_cache WHERE fingerprint = %s AND completed_at >= %s
ORDER BY completed_at DESC, run_id, task_id LIMIT %s;

-- name: cache_list
SELECT fingerprint, run_id, task_id, artifact, sha256, size, value_json::text, completed_at
FROM task_cache ORDER BY completed_at DESC, run_id, task_id LIMIT %s;

-- name: cache_clear
DELETE FROM task_cache WHERE completed_at < %s;

-- name: slot_lock
SELECT pg_advisory_xact_lock(hashtextextended(%s, 7));

-- name: slot_claim
UPDATE runs SET slot_key = %s, slot_limit = %s WHERE run_id = %s RETURNING slot_held, created_at;

-- name: slot_count
-- Slots held by live runs of the key, and live runs waiting ahead of this one (created
-- earlier) whose lease is current: someone is trying for them, so they go first.
SELECT
  (SELECT count(*) FROM runs WHERE slot_key = %(key)s AND slot_held
     AND status IN ('running', 'waiting', 'paused')),
  (SELECT count(*) FROM runs WHERE slot_key = %(key)s AND NOT slot_held
     AND status IN ('running', 'waiting', 'paused') AND lease_expires > %(now)s
     AND (created_at, run_id) < (%(created)s, %(run)s));

-- name: slot_hold
UPDATE runs SET slot_held = true WHERE run_id = %s;

-- name: count_runs
SELECT status, count(*) FROM runs GROUP BY status;

-- name: prunable_runs
-- Ended runs, last changed before the cutoff, whose lease nobody holds any more: an ended run
-- still leased has not been fully acted on (delivered, archived) and is left alone.
SELECT run_id FROM runs
WHERE updated_at < %(before)s AND status = ANY(%(statuses)s)
  AND status IN ('delivered', 'failed', 'cancelled')
  AND (lease_owner IS NULL OR lease_expires <= %(now)s)
ORDER BY updated_at, run_id LIMIT %(limit)s;

-- name: prune_receipts
-- The runs are locked first: one that an orchestrator takes over meanwhile waits, and is then
-- seen leased and kept.
WITH locked AS (
    SELECT run_id, pipeline, status, created_at, updated_at, last_seq, chain_head FROM runs
    WHERE run_id = ANY(%(runs)s)
      AND status IN ('delivered', 'failed', 'cancelled')
      AND (lease_owner IS NULL OR lease_expires <= %(now)s)
    ORDER BY run_id
    FOR UPDATE
)
INSERT INTO pruned_runs
    (run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at)
SELECT run_id, pipeline, status, created_at, updated_at, last_seq, chain_head, %(now)s
FROM locked
ON CONFLICT (run_id) DO UPDATE SET pruned_at = excluded.pruned_at
RETURNING run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at;

-- name: prune_artifact_refs
SELECT DISTINCT data ->> 'sha256' FROM events
WHERE run_id = ANY(%(runs)s) AND kind IN ('task_completed', 'task_reused', 'output_edited');

-- name: prune_rows
DELETE FROM events WHERE run_id = ANY(%(runs)s);
DELETE FROM commands WHERE run_id = ANY(%(runs)s);
DELETE FROM outbox WHERE run_id = ANY(%(runs)s);
DELETE FROM task_cache WHERE run_id = ANY(%(runs)s);
DELETE FROM task_queue WHERE run_id = ANY(%(runs)s);
DELETE FROM runs WHERE run_id = ANY(%(runs)s);

-- name: drop_artifacts
-- Stored outputs no remaining event names (content-addressed: another run may share one).
DELETE FROM artifacts WHERE sha256 = ANY(%(shas)s)
  AND sha256 NOT IN (
      SELECT data ->> 'sha256' FROM events
      WHERE kind IN ('task_completed', 'task_reused', 'output_edited')
        AND data ? 'sha256');

-- name: pruned_run
SELECT run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at
FROM pruned_runs WHERE run_id = %s;

-- name: task_slot_ask
-- A new attempt asks afresh (its place is when it started waiting); the same one keeps its row.
INSERT INTO task_slots (run_id, task_id, attempt, slot_key, asked_at, held)
VALUES (%s, %s, %s, %s, %s, false)
ON CONFLICT (run_id, task_id) DO UPDATE SET
  attempt = excluded.attempt, slot_key = excluded.slot_key, asked_at = excluded.asked_at,
  held = false
WHERE task_slots.attempt != excluded.attempt OR task_slots.slot_key != excluded.slot_key;

-- name: task_slot_row
SELECT held, asked_at FROM task_slots WHERE run_id = %s AND task_id = %s;

-- name: task_slot_count
-- Slots of the key held by attempts of live runs (a run whose orchestrator died keeps them
-- until it is taken up again: its attempt may still be running somewhere); and attempts of
-- live runs with a current lease that wait ahead of this one (they asked earlier and someone
-- still asks for them): within a key, the oldest waiter goes first.
SELECT
  (SELECT count(*) FROM task_slots s JOIN runs r ON r.run_id = s.run_id
   WHERE s.slot_key = %(key)s AND s.held
     AND r.status IN ('running', 'waiting', 'paused')),
  (SELECT count(*) FROM task_slots s JOIN runs r ON r.run_id = s.run_id
   WHERE s.slot_key = %(key)s AND NOT s.held
     AND r.status IN ('running', 'waiting', 'paused') AND r.lease_expires > %(now)s
     AND (s.asked_at, s.run_id, s.task_id) < (%(asked)s, %(run)s, %(task)s));

-- name: task_slot_hold
UPDATE task_slots SET held = true WHERE run_id = %s AND task_id = %s;

-- name: task_slots_of_run
SELECT task_id, attempt FROM task_slots WHERE run_id = %s;

-- name: task_slot_drop
DELETE FROM task_slots WHERE run_id = %s AND task_id = %s;
