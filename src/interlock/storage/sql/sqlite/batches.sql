-- Batches: the queries of `interlock.storage.batches`. A row's run that was pruned keeps its
-- status (from its receipt in pruned_runs); its cost is no longer known.
-- Tables: 011_batches.sql, 012_batch_variants.sql, 014_batch_tolerate.sql,
-- 016_batch_changes.sql, 018_estimated.sql.

-- name: insert_definition
INSERT OR IGNORE INTO definitions (hash, body) VALUES (?, ?);

-- name: insert_batch
INSERT INTO batches (batch_id, pipeline, definition_hash, source, inputs_file, concurrency,
                     max_cost_usd, row_count, created_at, experiment, variant, tolerate,
                     batch_waiting)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_row
INSERT INTO batch_rows (batch_id, row_no, topic, inputs) VALUES (?, ?, ?, ?);

-- name: get_batch
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches WHERE batch_id = ?;

-- name: list_batches
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches ORDER BY created_at DESC, batch_id DESC LIMIT ?;

-- name: experiment_batches
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches WHERE experiment = ? ORDER BY created_at, batch_id;

-- name: batch_rows
SELECT b.row_no, b.topic, b.inputs, b.state, b.tries, b.run_id, b.started_at, b.error, b.result,
       b.spent_before, b.tokens_before, coalesce(r.status, p.status), r.cost_usd, r.tokens,
       coalesce(r.batch_parked, 0),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = ? ORDER BY b.row_no;

-- name: batch_views
SELECT b.row_no, b.state, b.tries, b.run_id, b.spent_before, b.tokens_before,
       coalesce(r.status, p.status), r.cost_usd, r.tokens, b.result IS NOT NULL,
       coalesce(r.batch_parked, 0),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = ? ORDER BY b.row_no;

-- name: batch_views_of
-- The views of some rows (a JSON array of their numbers on SQLite, an array on PostgreSQL).
SELECT b.row_no, b.state, b.tries, b.run_id, b.spent_before, b.tokens_before,
       coalesce(r.status, p.status), r.cost_usd, r.tokens, b.result IS NOT NULL,
       coalesce(r.batch_parked, 0),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = ? AND b.row_no IN (SELECT value FROM json_each(?)) ORDER BY b.row_no;

-- name: claim_row
UPDATE batch_rows SET state = 'started', run_id = ?, started_at = ?
WHERE batch_id = ? AND row_no = ? AND state = 'pending' AND tries = ?;

-- name: refuse_row
UPDATE batch_rows SET state = 'refused', error = ? WHERE batch_id = ? AND row_no = ? AND run_id = ?;

-- name: set_result
UPDATE batch_rows SET result = ? WHERE batch_id = ? AND row_no = ? AND run_id = ?;

-- name: retry_row
UPDATE batch_rows
SET state = 'pending', tries = tries + 1, run_id = NULL, started_at = NULL, error = NULL,
    result = NULL, spent_before = ?, tokens_before = ?, estimated_before = ?
WHERE batch_id = ? AND row_no = ? AND tries = ? AND state IN ('started', 'refused');

-- name: count_change
UPDATE batches SET changes = changes + 1 WHERE batch_id = ?;

-- name: cancel_batch
UPDATE batches SET cancelled_at = ? WHERE batch_id = ? AND cancelled_at IS NULL;

-- name: cancel_rows
UPDATE batch_rows SET state = 'cancelled' WHERE batch_id = ? AND state = 'pending';

-- name: reopen_batch
UPDATE batches SET cancelled_at = NULL WHERE batch_id = ?;

-- name: reopen_rows
UPDATE batch_rows SET state = 'pending' WHERE batch_id = ? AND state = 'cancelled';

-- name: set_limits
UPDATE batches SET concurrency = ?, max_cost_usd = ?, batch_waiting = ? WHERE batch_id = ?;

-- name: hold_batch
UPDATE batches SET driver = ?, driver_expires = ?
WHERE batch_id = ? AND (driver IS NULL OR driver_expires IS NULL OR driver_expires <= ?
                        OR driver = ? OR driver = ?);

-- name: release_batch
UPDATE batches SET driver = NULL, driver_expires = NULL WHERE batch_id = ? AND driver = ?;
