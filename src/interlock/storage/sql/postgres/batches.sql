-- Batches: the queries of `interlock.storage.batches`. A row's run that was pruned keeps its
-- status (from its receipt in pruned_runs); its cost is no longer known.
-- Tables: 017_batches.sql, 019_batch_variants.sql, 021_batch_tolerate.sql,
-- 023_batch_changes.sql, 026_estimated.sql.

-- name: insert_definition
INSERT INTO definitions (hash, body) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING;

-- name: insert_batch
INSERT INTO batches (batch_id, pipeline, definition_hash, source, inputs_file, concurrency,
                     max_cost_usd, row_count, created_at, experiment, variant, tolerate,
                     batch_waiting)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: insert_row
INSERT INTO batch_rows (batch_id, row_no, topic, inputs) VALUES (%s, %s, %s, %s);

-- name: get_batch
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches WHERE batch_id = %s;

-- name: list_batches
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches ORDER BY created_at DESC, batch_id DESC LIMIT %s;

-- name: experiment_batches
SELECT batch_id, pipeline, definition_hash, source, inputs_file, concurrency, max_cost_usd,
       row_count, created_at, cancelled_at, driver, driver_expires, experiment, variant, tolerate,
       changes, batch_waiting
FROM batches WHERE experiment = %s ORDER BY created_at, batch_id;

-- name: batch_rows
SELECT b.row_no, b.topic, b.inputs, b.state, b.tries, b.run_id, b.started_at, b.error, b.result,
       b.spent_before, b.tokens_before, coalesce(r.status, p.status), r.cost_usd, r.tokens,
       coalesce(r.batch_parked, false),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = %s ORDER BY b.row_no;

-- name: batch_views
SELECT b.row_no, b.state, b.tries, b.run_id, b.spent_before, b.tokens_before,
       coalesce(r.status, p.status), r.cost_usd, r.tokens, b.result IS NOT NULL,
       coalesce(r.batch_parked, false),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = %s ORDER BY b.row_no;

-- name: batch_views_of
-- The views of some rows (a JSON array of their numbers on SQLite, an array on PostgreSQL).
SELECT b.row_no, b.state, b.tries, b.run_id, b.spent_before, b.tokens_before,
       coalesce(r.status, p.status), r.cost_usd, r.tokens, b.result IS NOT NULL,
       coalesce(r.batch_parked, false),
       b.estimated_before OR coalesce(r.estimated, false)
FROM batch_rows b LEFT JOIN runs r ON r.run_id = b.run_id
     LEFT JOIN pruned_runs p ON p.run_id = b.run_id
WHERE b.batch_id = %s AND b.row_no = ANY(%s) ORDER BY b.row_no;

-- name: claim_row
UPDATE batch_rows SET state = 'started', run_id = %s, started_at = %s
WHERE batch_id = %s AND row_no = %s AND state = 'pending' AND tries = %s;

-- name: refuse_row
UPDATE batch_rows SET state = 'refused', error = %s WHERE batch_id = %s AND row_no = %s AND run_id = %s;

-- name: set_result
UPDATE batch_rows SET result = %s WHERE batch_id = %s AND row_no = %s AND run_id = %s;

-- name: retry_row
UPDATE batch_rows
SET state = 'pending', tries = tries + 1, run_id = NULL, started_at = NULL, error = NULL,
    result = NULL, spent_before = %s, tokens_before = %s, estimated_before = %s
WHERE batch_id = %s AND row_no = %s AND tries = %s AND state IN ('started', 'refused');

-- name: count_change
UPDATE batches SET changes = changes + 1 WHERE batch_id = %s;

-- name: cancel_batch
UPDATE batches SET cancelled_at = %s WHERE batch_id = %s AND cancelled_at IS NULL;

-- name: cancel_rows
UPDATE batch_rows SET state = 'cancelled' WHERE batch_id = %s AND state = 'pending';

-- name: reopen_batch
UPDATE batches SET cancelled_at = NULL WHERE batch_id = %s;

-- name: reopen_rows
UPDATE batch_rows SET state = 'pending' WHERE batch_id = %s AND state = 'cancelled';

-- name: set_limits
UPDATE batches SET concurrency = %s, max_cost_usd = %s, batch_waiting = %s WHERE batch_id = %s;

-- name: hold_batch
UPDATE batches SET driver = %s, driver_expires = %s
WHERE batch_id = %s AND (driver IS NULL OR driver_expires IS NULL OR driver_expires <= %s
                        OR driver = %s OR driver = %s);

-- name: release_batch
UPDATE batches SET driver = NULL, driver_expires = NULL WHERE batch_id = %s AND driver = %s;
