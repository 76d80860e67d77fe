-- name: insert_definition
INSERT OR IGNORE INTO definitions (hash, body) VALUES (?, ?);

-- name: get_definition
SELECT body FROM definitions WHERE hash = ?;

-- name: insert_run
INSERT INTO runs (run_id, pipeline, topic, definition_hash, source, created_at, status, updated_at)
VALUES (?, ?, ?, ?, ?, ?, 'running', ?);

-- name: get_run
SELECT run_id, pipeline, topic, definition_hash, source, created_at, last_seq, status, phase,
       cost_usd, tokens, warnings, updated_at, lease_owner, lease_expires, lease_acquired_at,
       lease_renewed_at, batch_parked, estimated
FROM runs WHERE run_id = ?;

-- name: get_lease
SELECT lease_owner, lease_token, lease_expires FROM runs WHERE run_id = ?;

-- name: set_lease
UPDATE runs SET lease_owner = ?, lease_token = ?, lease_expires = ?, lease_acquired_at = ?,
       lease_renewed_at = ?
WHERE run_id = ?;

-- name: renew_lease
UPDATE runs SET lease_expires = ?, lease_renewed_at = ?
WHERE run_id = ? AND lease_owner = ? AND lease_token = ? AND lease_expires > ?;

-- name: release_lease
UPDATE runs SET lease_owner = NULL, lease_expires = NULL
WHERE run_id = ? AND lease_owner = ? AND lease_token = ?;

-- name: fence
-- The lease fence and the summary in one statement: the run's new last seq, or no row (the
-- lease expired or was taken over, and nothing changed). Events are numbered up to it.
UPDATE runs SET last_seq = last_seq + ?, status = ?, phase = ?, cost_usd = ?, tokens = ?,
       warnings = ?, updated_at = ?, batch_parked = ?, estimated = ?
WHERE run_id = ? AND lease_owner = ? AND lease_token = ? AND lease_expires > ?
RETURNING last_seq, chain_head;

-- name: fence_tail
-- `fence` for a run whose last seq and chain head this process committed last: the new seq
-- and head are set in the same statement (no `set_chain_head`), and the statement changes
-- nothing (no row) unless the row still ends where the process believes it does.
UPDATE runs SET last_seq = ?, status = ?, phase = ?, cost_usd = ?, tokens = ?, warnings = ?,
       updated_at = ?, batch_parked = ?, estimated = ?, chain_head = ?
WHERE run_id = ? AND lease_owner = ? AND lease_token = ? AND lease_expires > ?
      AND last_seq = ? AND chain_head IS ?;

-- name: fence_tail_same
-- `fence_tail` when the status and cost stay as they are: those columns are not set, so the
-- indexes that hold them (`runs_by_status`, `runs_by_cost`) are not rewritten; the row must
-- hold those values already.
UPDATE runs SET last_seq = ?, phase = ?, tokens = ?, warnings = ?, updated_at = ?,
       batch_parked = ?, estimated = ?, chain_head = ?
WHERE run_id = ? AND lease_owner = ? AND lease_token = ? AND lease_expires > ?
      AND last_seq = ? AND chain_head IS ? AND status = ? AND cost_usd = ?;

-- name: insert_event
INSERT INTO events (run_id, seq, at, kind, data, rule, why, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: set_chain_head
UPDATE runs SET chain_head = ? WHERE run_id = ?;

-- name: consume_command
UPDATE commands SET consumed_at = ? WHERE id = ? AND run_id = ? AND consumed_at IS NULL;

-- name: events_since
SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?;

-- name: all_events_after
SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
WHERE id > ? ORDER BY id LIMIT ?;

-- name: find_runs
SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT 10;

-- name: insert_command
INSERT INTO commands (run_id, kind, message, by, created_at) VALUES (?, ?, ?, ?, ?);

-- name: pending_commands
SELECT id, run_id, kind, message, by, created_at FROM commands
WHERE run_id = ? AND consumed_at IS NULL ORDER BY id;

-- name: all_pending_commands
SELECT id, run_id, kind, message, by, created_at FROM commands
WHERE consumed_at IS NULL ORDER BY id;

-- name: get_cursor
SELECT position FROM cursors WHERE name = ?;

-- name: set_cursor
INSERT INTO cursors (name, position) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET position = max(position, excluded.position);

-- name: insert_outbox
INSERT OR IGNORE INTO outbox (key, sink, run_id, payload, created_at, next_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: due_outbox
SELECT key, sink, run_id, payload, created_at, attempts FROM outbox
WHERE delivered_at IS NULL AND next_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
ORDER BY created_at, key LIMIT ?;

-- name: claim_outbox
UPDATE outbox SET claimed_by = ?, claimed_until = ?, attempts = attempts + 1
WHERE key = ? AND delivered_at IS NULL AND (claimed_until IS NULL OR claimed_until <= ?);

-- name: settle_outbox
UPDATE outbox SET delivered_at = ?, last_error = ?, next_at = ?, claimed_by = NULL,
       claimed_until = NULL
WHERE key = ? AND claimed_by = ?;

-- name: list_outbox
SELECT key, sink, run_id, payload, created_at, attempts, delivered_at, last_error FROM outbox
WHERE run_id = ? ORDER BY created_at, key;

-- name: insert_run_leased
INSERT INTO runs (run_id, pipeline, topic, definition_hash, source, created_at, status, updated_at,
                  lease_owner, lease_token, lease_expires, lease_acquired_at, lease_renewed_at)
VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?);

-- name: put_artifact
INSERT OR IGNORE INTO artifacts (sha256, size, body, created_at) VALUES (?, ?, ?, ?);

-- name: get_artifact
SELECT body FROM artifacts WHERE sha256 = ?;

-- name: cache_put
INSERT OR IGNORE INTO task_cache
    (fingerprint, run_id, task_id, artifact, sha256, size, value_json, completed_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: cache_find
SELECT fingerprint, run_id, task_id, artifact, sha256, size, value_json, completed_at
FROM task_cache WHERE fingerprint = ? AND completed_at >= ?
ORDER BY completed_at DESC, run_id, task_id LIMIT ?;

-- name: cache_list
SELECT fingerprint, run_id, task_id, artifact, sha256, size, value_json, completed_at
FROM task_cache ORDER BY completed_at DESC, run_id, task_id LIMIT ?;

-- name: cache_clear
DELETE FROM task_cache WHERE completed_at < ?;

-- name: slot_claim
UPDATE runs SET slot_key = ?, slot_limit = ? WHERE run_id = ? RETURNING slot_held, created_at;

-- name: slot_count
-- Slots held by live runs of the key, and live runs waiting ahead of this one (created
-- earlier) whose lease is current: someone is trying for them, so they go first.
SELECT
  (SELECT count(*) FROM runs WHERE slot_key = ? AND slot_held = 1
     AND status IN ('running', 'waiting', 'paused')),
  (SELECT count(*) FROM runs WHERE slot_key = ? AND slot_held = 0
     AND status IN ('running', 'waiting', 'paused') AND lease_expires > ?
     AND (created_at < ? OR (created_at = ? AND run_id < ?)));

-- name: slot_hold
UPDATE runs SET slot_held = 1 WHERE run_id = ?;

-- name: count_runs
SELECT status, count(*) FROM runs GROUP BY status;

-- name: prunable_runs
-- Ended runs, last changed before the cutoff, whose lease nobody holds any more: an ended run
-- still leased has not been fully acted on (delivered, archived) and is left alone.
SELECT run_id FROM runs
WHERE updated_at < ? AND status IN (SELECT value FROM json_each(?))
  AND status IN ('delivered', 'failed', 'cancelled')
  AND (lease_owner IS NULL OR lease_expires <= ?)
ORDER BY updated_at, run_id LIMIT ?;

-- name: prune_receipts
INSERT OR REPLACE INTO pruned_runs
    (run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at)
SELECT run_id, pipeline, status, created_at, updated_at, last_seq, chain_head, ? FROM runs
WHERE run_id IN (SELECT value FROM json_each(?))
  AND status IN ('delivered', 'failed', 'cancelled')
  AND (lease_owner IS NULL OR lease_expires <= ?)
RETURNING run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at;

-- name: prune_artifact_refs
SELECT DISTINCT json_extract(data, '$.sha256') FROM events
WHERE run_id IN (SELECT value FROM json_each(?))
  AND kind IN ('task_completed', 'task_reused', 'output_edited');

-- name: prune_events
DELETE FROM events WHERE run_id IN (SELECT value FROM json_each(?));

-- name: prune_commands
DELETE FROM commands WHERE run_id IN (SELECT value FROM json_each(?));

-- name: prune_outbox
DELETE FROM outbox WHERE run_id IN (SELECT value FROM json_each(?));

-- name: prune_cache
DELETE FROM task_cache WHERE run_id IN (SELECT value FROM json_each(?));

-- name: prune_runs
DELETE FROM runs WHERE run_id IN (SELECT value FROM json_each(?));

-- name: drop_artifacts
-- Stored outputs no remaining event names (content-addressed: another run may share one).
DELETE FROM artifacts WHERE sha256 IN (SELECT value FROM json_each(?))
  AND sha256 NOT IN (
      SELECT json_extract(data, '$.sha256') FROM events
      WHERE kind IN ('task_completed', 'task_reused', 'output_edited')
        AND json_extract(data, '$.sha256') IS NOT NULL);

-- name: pruned_run
SELECT run_id, pipeline, status, created_at, ended_at, last_seq, chain_head, pruned_at
FROM pruned_runs WHERE run_id = ?;

-- name: task_slot_ask
-- A new attempt asks afresh (its place is when it started waiting); the same one keeps its row.
INSERT INTO task_slots (run_id, task_id, attempt, slot_key, asked_at, held)
VALUES (?, ?, ?, ?, ?, 0)
ON CONFLICT (run_id, task_id) DO UPDATE SET
  attempt = excluded.attempt, slot_key = excluded.slot_key, asked_at = excluded.asked_at,
  held = 0
WHERE task_slots.attempt != excluded.attempt OR task_slots.slot_key != excluded.slot_key;

-- name: task_slot_row
SELECT held, asked_at FROM task_slots WHERE run_id = ? AND task_id = ?;

-- name: task_slot_count
-- Slots of the key held by attempts of live runs (a run whose orchestrator died keeps them
-- until it is taken up again: its attempt may still be running somewhere); and attempts of
-- live runs with a current lease that wait ahead of this one (they asked earlier and someone
-- still asks for them): within a key, the oldest waiter goes first.
SELECT
  (SELECT count(*) FROM task_slots s JOIN runs r ON r.run_id = s.run_id
   WHERE s.slot_key = :key AND s.held = 1
     AND r.status IN ('running', 'waiting', 'paused')),
  (SELECT count(*) FROM task_slots s JOIN runs r ON r.run_id = s.run_id
   WHERE s.slot_key = :key AND s.held = 0
     AND r.status IN ('running', 'waiting', 'paused') AND r.lease_expires > :now
     AND (s.asked_at < :asked OR (s.asked_at = :asked
          AND (s.run_id < :run OR (s.run_id = :run AND s.task_id < :task)))));

-- name: task_slot_hold
UPDATE task_slots SET held = 1 WHERE run_id = ? AND task_id = ?;

-- name: task_slots_of_run
SELECT task_id, attempt FROM task_slots WHERE run_id = ?;

-- name: task_slot_drop
DELETE FROM task_slots WHERE run_id = ? AND task_id = ?;
