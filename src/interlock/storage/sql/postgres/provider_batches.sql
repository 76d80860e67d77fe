-- Queries of the provider batches (`interlock.storage.provider_batches`).

-- name: add_request
INSERT INTO provider_batch_requests (key, provider, alias, body, state, created_at, run_id, task_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (key) DO NOTHING;

-- name: request
SELECT key, provider, alias, body, state, created_at, run_id, task_id, tag, answer, error, retryable
FROM provider_batch_requests WHERE key = %s;

-- name: gathered
SELECT key, provider, alias, body, state, created_at, run_id, task_id, tag, answer, error, retryable
FROM provider_batch_requests WHERE provider = %s AND alias = %s AND state = 'gathered'
ORDER BY created_at, key LIMIT %s;

-- name: in_batch
SELECT key, provider, alias, body, state, created_at, run_id, task_id, tag, answer, error, retryable
FROM provider_batch_requests WHERE tag = %s ORDER BY key;

-- name: of_run
SELECT key, provider, alias, body, state, created_at, run_id, task_id, tag, answer, error, retryable
FROM provider_batch_requests WHERE run_id = %s ORDER BY key;

-- name: add_batch
INSERT INTO provider_batches (tag, provider, kind, alias, state, created_at)
VALUES (%s, %s, %s, %s, 'submitting', %s);

-- name: claim
UPDATE provider_batch_requests SET state = 'batched', tag = %s WHERE key = %s AND state = 'gathered';

-- name: submitted
UPDATE provider_batches SET state = 'submitted', provider_batch_id = %s, provider_status = %s,
    submitted_at = %s WHERE tag = %s;

-- name: status
UPDATE provider_batches SET provider_status = %s WHERE tag = %s;

-- name: finish
UPDATE provider_batch_requests SET state = %s, answer = %s, error = %s, retryable = %s
WHERE key = %s AND state IN ('gathered', 'batched');

-- name: end
UPDATE provider_batches SET state = %s, provider_status = %s, ended_at = %s WHERE tag = %s;

-- name: batches
SELECT b.tag, b.provider, b.kind, b.alias, b.state, b.created_at, b.provider_batch_id,
       b.provider_status, b.submitted_at, b.ended_at,
       (SELECT count(*) FROM provider_batch_requests r WHERE r.tag = b.tag)
FROM provider_batches b ORDER BY b.created_at, b.tag;
