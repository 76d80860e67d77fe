-- A hand-out taken back by its worker. A worker cut off from the database for longer than
-- its lease (an outage, a failover, a network partition) used to find, once it reached the
-- database again, that a sweep had queued its entry again: its result was refused and the
-- attempt ran a second time (a model call paid twice), although nobody else had taken it.
-- A sweep now keeps the holder's name on the entry it queues again (`requeue_expired` in
-- queue.sql), and the holder may renew that hand-out or record its result as long as the
-- delivery is still its own: once another worker claims the entry, the delivery grows and
-- the first worker is fenced off as before. An entry handed back, or cancelled and queued
-- again, has no holder's name and cannot be taken back.
--
-- And a worker is never handed an entry it holds already (`p_skip`: those it is running or has
-- results for). After a sweep such an entry is queued, and claiming it again would grow its
-- delivery past the one its result carries. The picks leave them out before counting, so the
-- worker still gets as many others as it has room for. New arguments come last, with defaults,
-- as in 015: a worker of an earlier version calls the turn unchanged.
DROP FUNCTION interlock_queue_turn(
    INTEGER, JSONB, TEXT[], BYTEA[], BIGINT[], INTEGER[], JSONB[], TEXT[], TEXT[], TEXT[], BIGINT,
    DOUBLE PRECISION, TEXT, DOUBLE PRECISION, BOOLEAN, INTEGER[]);
DROP FUNCTION interlock_queue_pick_kinds(TEXT[], INTEGER[], TEXT[], BIGINT, DOUBLE PRECISION,
                                         INTEGER);
DROP FUNCTION interlock_queue_pick(TEXT[], TEXT[], BIGINT, DOUBLE PRECISION, INTEGER);

-- `012_queue_pick.sql`'s pick (its planner settings, index order, `ROWS 4` of 013), skipping
-- the entries in `p_skip`.
CREATE FUNCTION interlock_queue_pick(p_kinds TEXT[], p_tags TEXT[], p_only BIGINT,
                                     p_older DOUBLE PRECISION, p_n INTEGER,
                                     p_skip BIGINT[] DEFAULT NULL)
RETURNS TABLE (id BIGINT, priority INTEGER, limited BOOLEAN)
LANGUAGE plpgsql
SET enable_sort = off
SET enable_bitmapscan = off
ROWS 4
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT q.id, q.priority,
           EXISTS (SELECT 1 FROM queue_limits l WHERE l.scope = ANY(q.scopes))
    FROM task_queue q
    WHERE q.state = 'queued' AND q.kind = ANY(p_kinds) AND q.tags <@ p_tags
      AND (p_only IS NULL OR q.id = p_only)
      AND (p_older IS NULL
           OR coalesce(q.claimed_at, q.created_at) < extract(epoch FROM clock_timestamp()) - p_older)
      AND q.id <> ALL(coalesce(p_skip, '{}'))
      AND NOT EXISTS (
          SELECT 1 FROM queue_limits l
          WHERE l.scope = ANY(q.scopes)
            AND l.max_running <= (SELECT count(*) FROM task_queue r
                                  WHERE r.state = 'claimed' AND r.scopes @> ARRAY[l.scope]))
    ORDER BY q.priority DESC, q.id
    LIMIT p_n FOR UPDATE OF q SKIP LOCKED;
END
$$;

-- `015_kind_slots.sql`'s picks by kind, skipping the entries in `p_skip`.
CREATE FUNCTION interlock_queue_pick_kinds(p_kinds TEXT[], p_limits INTEGER[], p_tags TEXT[],
                                           p_only BIGINT, p_older DOUBLE PRECISION,
                                           p_n INTEGER, p_skip BIGINT[] DEFAULT NULL)
RETURNS TABLE (id BIGINT, priority INTEGER, limited BOOLEAN)
LANGUAGE plpgsql
ROWS 8
AS $$
#variable_conflict use_column
BEGIN
    IF p_limits IS NULL THEN
        RETURN QUERY
        SELECT p.id, p.priority, p.limited
        FROM interlock_queue_pick(p_kinds, p_tags, p_only, p_older, p_n, p_skip) p;
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        IF p_limits[i] > 0 THEN
            RETURN QUERY
            SELECT p.id, p.priority, p.limited
            FROM interlock_queue_pick(ARRAY[p_kinds[i]], p_tags, p_only, p_older, p_limits[i],
                                      p_skip) p;
        END IF;
    END LOOP;
END
$$;

-- The turn of `015_kind_slots.sql`: results recorded as above, and claims skipping what the
-- worker holds (the entries it records in this turn among them).
CREATE FUNCTION interlock_queue_turn(
    p_n INTEGER, p_known JSONB, p_out_shas TEXT[], p_out_bodies BYTEA[], p_fin_ids BIGINT[],
    p_fin_deliveries INTEGER[], p_fin_results JSONB[], p_fin_shas TEXT[], p_kinds TEXT[],
    p_tags TEXT[], p_only BIGINT, p_older DOUBLE PRECISION, p_worker TEXT,
    p_ttl DOUBLE PRECISION, p_news BOOLEAN, p_limits INTEGER[] DEFAULT NULL,
    p_holding BIGINT[] DEFAULT NULL)
RETURNS TABLE (row_kind TEXT, id BIGINT, limited BOOLEAN, run_id TEXT, task_id TEXT,
               attempt INTEGER, delivery INTEGER, payload JSONB, seq INTEGER,
               at DOUBLE PRECISION, kind TEXT, data JSONB, rule TEXT, why TEXT, hash TEXT)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_bitmapscan = off
ROWS 8
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH stored AS (
        INSERT INTO artifacts (sha256, size, body, created_at)
        SELECT o.sha, length(o.body), o.body, extract(epoch FROM clock_timestamp())
        FROM unnest(p_out_shas, p_out_bodies) AS o(sha, body)
        ON CONFLICT (sha256) DO NOTHING
    ), done AS (
        UPDATE task_queue t SET state = 'done', result = f.result, output_sha = f.sha,
               lease_expires = NULL, finished_at = extract(epoch FROM clock_timestamp())
        FROM unnest(p_fin_ids, p_fin_deliveries, p_fin_results, p_fin_shas)
             AS f(id, delivery, result, sha)
        -- Found by id: `coalesce` keeps the planner off the index of claimed entries, which it
        -- believes holds a few rows but which also holds every entry claimed since the last
        -- vacuum (thousands on a busy queue, all walked on each turn). Current: still this
        -- worker's hand-out, or queued again by a sweep with nobody having taken it since.
        WHERE t.id = f.id AND t.delivery = f.delivery
          AND coalesce(t.state = 'claimed' OR (t.state = 'queued' AND t.worker = p_worker),
                       false)
        RETURNING t.id
    ), pick AS (
        -- In index order, whatever the statistics (see `012_queue_pick.sql`).
        SELECT p.id, p.priority, p.limited
        FROM interlock_queue_pick_kinds(p_kinds, p_limits, p_tags, p_only, p_older, p_n,
                                        coalesce(p_holding, '{}') || coalesce(p_fin_ids, '{}')) p
    ), took AS (
        UPDATE task_queue t SET state = 'claimed', worker = p_worker, delivery = t.delivery + 1,
               lease_expires = extract(epoch FROM clock_timestamp()) + p_ttl,
               claimed_at = extract(epoch FROM clock_timestamp())
        FROM pick
        WHERE t.id = pick.id AND NOT pick.limited
        RETURNING t.id, t.run_id, t.task_id, t.attempt, t.delivery, t.payload, t.kind
    ), known AS (
        SELECT k.key AS run_id, k.value::int AS seq FROM jsonb_each_text(p_known) k
    )
    SELECT 'done' AS row_kind, done.id, NULL::bool, NULL::text, NULL::text, NULL::int, NULL::int,
           NULL::jsonb, NULL::int, NULL::float8, NULL::text, NULL::jsonb, NULL::text, NULL::text,
           NULL::text
    FROM done, LATERAL (SELECT pg_notify('interlock_task_states', done.id || ':done')) note
    UNION ALL
    SELECT 'claim', pick.id, pick.limited, took.run_id, took.task_id, took.attempt, took.delivery,
           took.payload, NULL, NULL, took.kind, NULL, NULL, NULL, NULL
    FROM pick
    LEFT JOIN took ON took.id = pick.id
    LEFT JOIN LATERAL (
        SELECT pg_notify('interlock_task_states', took.id || ':claimed:' || p_worker)
        WHERE took.id IS NOT NULL
    ) note ON true
    UNION ALL
    SELECT 'event', e.id, NULL, e.run_id, NULL, NULL, NULL, NULL, e.seq, e.at, e.kind, e.data,
           e.rule, e.why, e.hash
    FROM (SELECT DISTINCT took.run_id, coalesce(known.seq, 0) AS seq
          FROM took LEFT JOIN known ON known.run_id = took.run_id) r
    -- Per run, both bounds from one row, so that each run's news is a range of the (run_id, seq)
    -- index whatever the planner guesses of the tables' sizes: never a scan of the whole ledger.
    CROSS JOIN LATERAL (
        SELECT id, run_id, seq, at, kind, data, rule, why, hash FROM events
        WHERE events.run_id = r.run_id AND events.seq > r.seq
    ) e
    WHERE p_news;
END
$$;
