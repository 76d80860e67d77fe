-- Claims by kind: a worker runs model calls and `call:` functions (which mostly wait) dozens
-- at once, and commands (processes on its machine) a few (`interlock worker --concurrency
-- model=32`). A turn then asks for up to so many entries of each kind, `p_limits[i]` of
-- `p_kinds[i]`, each kind's best in index order as before; without `p_limits` (a worker of
-- an earlier version) it asks for `p_n` of all its kinds together, as before.
CREATE FUNCTION interlock_queue_pick_kinds(p_kinds TEXT[], p_limits INTEGER[], p_tags TEXT[],
                                           p_only BIGINT, p_older DOUBLE PRECISION,
                                           p_n INTEGER)
RETURNS TABLE (id BIGINT, priority INTEGER, limited BOOLEAN)
LANGUAGE plpgsql
ROWS 8
AS $$
#variable_conflict use_column
BEGIN
    IF p_limits IS NULL THEN
        RETURN QUERY
        SELECT p.id, p.priority, p.limited
        FROM interlock_queue_pick(p_kinds, p_tags, p_only, p_older, p_n) p;
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        IF p_limits[i] > 0 THEN
            RETURN QUERY
            SELECT p.id, p.priority, p.limited
            FROM interlock_queue_pick(ARRAY[p_kinds[i]], p_tags, p_only, p_older, p_limits[i]) p;
        END IF;
    END LOOP;
END
$$;

-- The turn of `013_queue_turn.sql`, its claims by kind when `p_limits` is given, each claim
-- row naming its kind (in the `kind` column, the event rows' otherwise). The new argument
-- comes last with a default, so a worker of an earlier version calls it unchanged.
DROP FUNCTION interlock_queue_turn(
    INTEGER, JSONB, TEXT[], BYTEA[], BIGINT[], INTEGER[], JSONB[], TEXT[], TEXT[], TEXT[], BIGINT,
    DOUBLE PRECISION, TEXT, DOUBLE PRECISION, BOOLEAN);

CREATE FUNCTION interlock_queue_turn(
    p_n INTEGER, p_known JSONB, p_out_shas TEXT[], p_out_bodies BYTEA[], p_fin_ids BIGINT[],
    p_fin_deliveries INTEGER[], p_fin_results JSONB[], p_fin_shas TEXT[], p_kinds TEXT[],
    p_tags TEXT[], p_only BIGINT, p_older DOUBLE PRECISION, p_worker TEXT,
    p_ttl DOUBLE PRECISION, p_news BOOLEAN, p_limits INTEGER[] DEFAULT NULL)
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
        -- vacuum (thousands on a busy queue, all walked on each turn).
        WHERE t.id = f.id AND t.delivery = f.delivery AND coalesce(t.state = 'claimed', false)
        RETURNING t.id
    ), pick AS (
        -- In index order, whatever the statistics (see `012_queue_pick.sql`).
        SELECT p.id, p.priority, p.limited
        FROM interlock_queue_pick_kinds(p_kinds, p_limits, p_tags, p_only, p_older, p_n) p
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
