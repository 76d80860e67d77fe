-- Task queue statements. Times come from the database clock (`clock_timestamp()`) so that
-- workers on machines with skewed clocks agree on when a hand-out expires.

-- name: enqueue
-- Add an attempt once (a cancelled entry is queued again) and announce it when queued; one
-- statement, so it is atomic on its own. Returns the entry's id and state.
WITH added AS (
    INSERT INTO task_queue (run_id, task_id, attempt, kind, tags, scopes, priority, payload,
                            created_at)
    VALUES (%(run_id)s, %(task_id)s, %(attempt)s, %(kind)s, %(tags)s, %(scopes)s, %(priority)s,
            %(payload)s, extract(epoch FROM clock_timestamp()))
    ON CONFLICT (run_id, task_id, attempt) DO UPDATE
        SET state = 'queued', worker = NULL, lease_expires = NULL, finished_at = NULL
        WHERE task_queue.state = 'cancelled'
    RETURNING id, state
), entry AS (
    SELECT id, state FROM added
    UNION ALL
    SELECT id, state FROM task_queue
    WHERE run_id = %(run_id)s AND task_id = %(task_id)s AND attempt = %(attempt)s
      AND NOT EXISTS (SELECT 1 FROM added)
)
SELECT entry.id, entry.state FROM entry
LEFT JOIN LATERAL (
    SELECT pg_notify('interlock_tasks', entry.id || ':queued') WHERE entry.state = 'queued'
) note ON true;

-- name: enqueue_many
-- Add many attempts (%(entries)s, a JSON array of {run_id, task_id, attempt, kind, tags,
-- scopes, priority, payload}) in one statement and one commit, announcing each one added;
-- returns (position in the array, id, state) for each, in order. `DO NOTHING` leaves an
-- attempt enqueued before untouched and unlocked, so this statement holds only the rows it
-- creates (inserted in key order) and cannot close a lock cycle with a worker's turn or with
-- another batch; its id and state come from the snapshot. Null for an entry committed by
-- someone else after the snapshot, and `cancelled` for one to queue again: the caller
-- enqueues those one by one (`enqueue`).
WITH wanted AS (
    SELECT w.ord, w.e ->> 'run_id' AS run_id, w.e ->> 'task_id' AS task_id,
           (w.e ->> 'attempt')::int AS attempt, w.e ->> 'kind' AS kind,
           ARRAY(SELECT jsonb_array_elements_text(w.e -> 'tags')) AS tags,
           ARRAY(SELECT jsonb_array_elements_text(w.e -> 'scopes')) AS scopes,
           (w.e ->> 'priority')::int AS priority, w.e -> 'payload' AS payload
    FROM jsonb_array_elements(%(entries)s::jsonb) WITH ORDINALITY AS w(e, ord)
), added AS (
    INSERT INTO task_queue (run_id, task_id, attempt, kind, tags, scopes, priority, payload,
                            created_at)
    SELECT run_id, task_id, attempt, kind, tags, scopes, priority, payload,
           extract(epoch FROM clock_timestamp())
    FROM wanted ORDER BY run_id, task_id, attempt
    ON CONFLICT (run_id, task_id, attempt) DO NOTHING
    RETURNING id, run_id, task_id, attempt, state
)
SELECT w.ord, coalesce(a.id, q.id), coalesce(a.state, q.state)
FROM wanted w
LEFT JOIN added a
    ON a.run_id = w.run_id AND a.task_id = w.task_id AND a.attempt = w.attempt
LEFT JOIN task_queue q
    ON a.id IS NULL AND q.run_id = w.run_id AND q.task_id = w.task_id AND q.attempt = w.attempt
LEFT JOIN LATERAL (
    SELECT pg_notify('interlock_tasks', a.id || ':queued') WHERE a.id IS NOT NULL
) note ON true
ORDER BY w.ord;

-- name: notify
-- `interlock_tasks` announces queued entries (workers listen); `interlock_task_states` every
-- other change (orchestrators waiting on entries listen): each hears only what it acts on.
SELECT pg_notify(%s, %s);

-- name: expired
SELECT id, delivery FROM task_queue
WHERE state = 'claimed' AND lease_expires < extract(epoch FROM clock_timestamp())
ORDER BY lease_expires LIMIT 100 FOR UPDATE SKIP LOCKED;

-- name: requeue
-- An entry handed back by its worker (shutting down): anyone's to take, its holder's included.
UPDATE task_queue SET state = 'queued', worker = NULL, lease_expires = NULL
WHERE id = %s AND delivery = %s AND state = 'claimed';

-- name: requeue_expired
-- An entry whose hand-out expired, queued for any worker; the holder's name stays, so that a
-- holder that was only cut off from the database (an outage longer than its lease) can renew
-- it or record its result as long as nobody else has taken it (the delivery is still its own).
UPDATE task_queue SET state = 'queued', lease_expires = NULL
WHERE id = %s AND delivery = %s AND state = 'claimed';

-- name: give_up
-- The journals its workers kept (`keep_journals`) go back with the failure, so that the
-- task's next attempt replays the calls they were answered.
UPDATE task_queue SET state = 'done', worker = NULL, lease_expires = NULL,
       result = %s || jsonb_strip_nulls(jsonb_build_object('journals', payload -> 'journals')),
       finished_at = extract(epoch FROM clock_timestamp())
WHERE id = %s AND delivery = %s AND state = 'claimed';

-- name: finish_claim
-- A worker's one round trip per turn: record the results of the hand-outs it finished (each
-- only while its hand-out is current: `delivery` fences a worker presumed dead), store their
-- outputs, and claim up to %(n)s of the best queued entries it can run, returning with them
-- what the ledger recorded for their runs since the seq the worker last read of each
-- (%(known)s, a JSON object: run id -> seq): the worker folds that news to see whether each claimed
-- attempt is still wanted, without another query. One statement, so finishing and claiming
-- commit together or not at all. Entries under a concurrency limit are only named
-- (`limited`). Rows: ('done', id), ('claim', id, limited, run, task,
-- attempt, delivery, payload, kind) and ('event', id, run, seq, at, kind, data, rule, why, hash).
-- With `limits`, up to limits[i] entries of kind kinds[i] are claimed instead.
-- The statement is `interlock_queue_turn` (`013_queue_turn.sql` to `016_take_back.sql`), whose
-- plan holds whatever the statistics say. Arrays travel in binary format, which spares the
-- worker quoting and escaping every element.
SELECT * FROM interlock_queue_turn(
    %(n)s, %(known)s::jsonb, %(out_shas)b::text[], %(out_bodies)b::bytea[], %(fin_ids)b::bigint[],
    %(fin_deliveries)b::int[], %(fin_results)b::jsonb[], %(fin_shas)b::text[], %(kinds)b::text[],
    %(tags)b::text[], %(only)s::bigint, %(older)s::float8, %(worker)s, %(ttl)s::float8, %(news)s,
    %(limits)b::int[], %(holding)b::bigint[]);

-- name: prune
-- Entries finished at least %(keep)s seconds ago whose run has ended: no orchestrator can
-- want their result any more (the ledger holds what they reported). At most %(limit)s per
-- statement; SKIP LOCKED lets several orchestrators prune at once without waiting.
WITH gone AS (
    SELECT q.id FROM task_queue q JOIN runs r ON r.run_id = q.run_id
    WHERE q.state IN ('done', 'cancelled')
      AND q.finished_at < extract(epoch FROM clock_timestamp()) - %(keep)s
      AND r.status IN ('delivered', 'failed', 'cancelled')
    LIMIT %(limit)s
    FOR UPDATE OF q SKIP LOCKED
)
DELETE FROM task_queue t USING gone WHERE t.id = gone.id;

-- name: queued_ids
-- Entries waiting for a worker, best first (announced again after a transport lost them).
SELECT id FROM task_queue WHERE state = 'queued' ORDER BY priority DESC, id LIMIT %s;

-- name: withdraw_ended
-- Entries still queued for runs that have ended: nobody will ever want them.
UPDATE task_queue q SET state = 'cancelled', finished_at = extract(epoch FROM clock_timestamp())
FROM runs r
WHERE r.run_id = q.run_id AND q.state = 'queued'
  AND r.status IN ('delivered', 'failed', 'cancelled');

-- name: candidates
SELECT id, scopes FROM task_queue q
WHERE state = 'queued' AND kind = ANY(%(kinds)s) AND tags <@ %(tags)s
  AND (%(only)s::bigint IS NULL OR id = %(only)s::bigint)
  AND (%(older)s::float8 IS NULL
       OR coalesce(claimed_at, created_at) < extract(epoch FROM clock_timestamp()) - %(older)s)
  AND id <> ALL(%(holding)s::bigint[])
  AND NOT EXISTS (
      SELECT 1 FROM queue_limits l
      WHERE l.scope = ANY(q.scopes)
        AND l.max_running <= (SELECT count(*) FROM task_queue r
                              WHERE r.state = 'claimed' AND r.scopes @> ARRAY[l.scope]))
ORDER BY priority DESC, id
LIMIT 1 FOR UPDATE SKIP LOCKED;

-- name: lock_limits
SELECT scope, max_running FROM queue_limits WHERE scope = ANY(%s) ORDER BY scope FOR UPDATE;

-- name: running_in_scope
SELECT count(*) FROM task_queue WHERE state = 'claimed' AND scopes @> ARRAY[%s];

-- name: claim
UPDATE task_queue SET state = 'claimed', worker = %s, delivery = delivery + 1,
       lease_expires = extract(epoch FROM clock_timestamp()) + %s,
       claimed_at = extract(epoch FROM clock_timestamp())
WHERE id = %s
RETURNING id, run_id, task_id, attempt, delivery, payload, kind;

-- name: heartbeat
-- Renew a current hand-out, or take back one a sweep queued again while nobody else took it.
UPDATE task_queue SET state = 'claimed', lease_expires = extract(epoch FROM clock_timestamp()) + %s
WHERE id = %s AND delivery = %s AND (state = 'claimed' OR (state = 'queued' AND worker = %s));

-- name: keep_journals
-- A current hand-out's journals as they grew: the payload of its next hand-out carries them.
-- A journal the worker left out (past the size that travels) keeps the copy it had.
UPDATE task_queue
SET payload = jsonb_set(payload, '{journals}', coalesce(payload -> 'journals', '{}') || %s)
WHERE id = %s AND delivery = %s AND (state = 'claimed' OR (state = 'queued' AND worker = %s));

-- name: heartbeat_many
-- `heartbeat` for every hand-out a worker holds, in one statement (a worker whose calls wait
-- in provider batches may hold thousands); locked in id order, as every statement locking
-- several entries does. The ids renewed (or taken back) are returned: the others were lost.
WITH held AS (
    SELECT t.id FROM task_queue t
    JOIN unnest(%(ids)b::bigint[], %(deliveries)b::int[]) AS h(id, delivery)
      ON t.id = h.id AND t.delivery = h.delivery
    WHERE coalesce(t.state = 'claimed' OR (t.state = 'queued' AND t.worker = %(worker)s), false)
    ORDER BY t.id
    FOR UPDATE OF t
)
UPDATE task_queue t SET state = 'claimed',
       lease_expires = extract(epoch FROM clock_timestamp()) + %(ttl)s
FROM held WHERE t.id = held.id
RETURNING t.id;

-- name: park
-- The current hand-out's model call went into a provider batch (%(parked)s true) or came back;
-- announced to the orchestrators waiting on the entry (see `025_batch_parking.sql`).
WITH parked AS (
    UPDATE task_queue SET
        parked_at = CASE WHEN %(parked)s THEN extract(epoch FROM clock_timestamp())
                         ELSE parked_at END,
        unparked_at = CASE WHEN %(parked)s THEN NULL
                           ELSE extract(epoch FROM clock_timestamp()) END
    WHERE id = %(id)s AND delivery = %(delivery)s
      AND (state = 'claimed' OR (state = 'queued' AND worker = %(worker)s))
    RETURNING id
)
SELECT parked.id FROM parked, LATERAL (
    SELECT pg_notify('interlock_task_states',
                     parked.id || CASE WHEN %(parked)s THEN ':parked' ELSE ':unparked' END)
) note;

-- name: finish
-- Record the result of a current hand-out (see `heartbeat`) and announce it; no row when it
-- was not current.
WITH done AS (
    UPDATE task_queue SET state = 'done', result = %s, output_sha = %s, lease_expires = NULL,
           finished_at = extract(epoch FROM clock_timestamp())
    WHERE id = %s AND delivery = %s
      AND (state = 'claimed' OR (state = 'queued' AND worker = %s))
    RETURNING id
)
SELECT done.id FROM done, LATERAL (SELECT pg_notify('interlock_task_states', done.id || ':done')) note;

-- name: finish_with_output
-- `finish`, storing the output as an artifact in the same statement (it is kept even when the
-- hand-out was not current: artifacts are immutable and named by their content).
WITH stored AS (
    INSERT INTO artifacts (sha256, size, body, created_at)
    VALUES (%s, %s, %s, extract(epoch FROM clock_timestamp()))
    ON CONFLICT (sha256) DO NOTHING
), done AS (
    UPDATE task_queue SET state = 'done', result = %s, output_sha = %s, lease_expires = NULL,
           finished_at = extract(epoch FROM clock_timestamp())
    WHERE id = %s AND delivery = %s
      AND (state = 'claimed' OR (state = 'queued' AND worker = %s))
    RETURNING id
)
SELECT done.id FROM done, LATERAL (SELECT pg_notify('interlock_task_states', done.id || ':done')) note;

-- name: cancel
UPDATE task_queue SET state = 'cancelled', lease_expires = NULL,
       finished_at = extract(epoch FROM clock_timestamp())
WHERE run_id = %s AND task_id = %s AND attempt = %s AND state IN ('queued', 'claimed')
RETURNING id;

-- name: get
SELECT id, state, worker, delivery, result, output_sha, parked_at, unparked_at
FROM task_queue WHERE id = %s;

-- name: get_many_with_output
-- Done entries with their outputs' bodies: the results of a tick's worth of attempts in one
-- round trip.
SELECT q.id, q.state, q.worker, q.delivery, q.result, q.output_sha, q.parked_at, q.unparked_at,
       a.body
FROM task_queue q LEFT JOIN artifacts a ON a.sha256 = q.output_sha
WHERE q.id = ANY(%b);

-- name: states
SELECT id, state, delivery FROM task_queue WHERE id = ANY(%b);

-- name: watched
-- `states`, with when each entry's call last went into a provider batch and came back.
SELECT id, state, delivery, parked_at, unparked_at FROM task_queue WHERE id = ANY(%b);

-- name: set_limit
INSERT INTO queue_limits (scope, max_running) VALUES (%s, %s)
ON CONFLICT (scope) DO UPDATE SET max_running = excluded.max_running;

-- name: drop_limit
DELETE FROM queue_limits WHERE scope = %s;

-- name: put_artifact
INSERT INTO artifacts (sha256, size, body, created_at)
VALUES (%s, %s, %s, extract(epoch FROM clock_timestamp()))
ON CONFLICT (sha256) DO NOTHING;

-- name: get_artifact
SELECT body FROM artifacts WHERE sha256 = %s;

-- name: get_artifacts
SELECT sha256, body FROM artifacts WHERE sha256 = ANY(%b);

-- name: has_artifacts
SELECT sha256 FROM artifacts WHERE sha256 = ANY(%b);
