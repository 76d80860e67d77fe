-- The best queued entries a worker can run, locked for it (`finish_claim`'s `pick`).
-- A function so that its own planner settings hold for its query alone: walk
-- `task_queue_ready` in order and stop at the first entries that fit, whatever the
-- statistics say. On a fresh table, or one analysed while few entries waited, the planner
-- otherwise expects one queued entry, fetches every queued entry and sorts them all for
-- each claim: with 1,000 queued that was 2-3 ms of server CPU per claim instead of under
-- one. PL/pgSQL keeps the plan for the session.
CREATE FUNCTION interlock_queue_pick(p_kinds TEXT[], p_tags TEXT[], p_only BIGINT,
                                     p_older DOUBLE PRECISION, p_n INTEGER)
RETURNS TABLE (id BIGINT, priority INTEGER, limited BOOLEAN)
LANGUAGE plpgsql
SET enable_sort = off
SET enable_bitmapscan = off
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
      AND NOT EXISTS (
          SELECT 1 FROM queue_limits l
          WHERE l.scope = ANY(q.scopes)
            AND l.max_running <= (SELECT count(*) FROM task_queue r
                                  WHERE r.state = 'claimed' AND r.scopes @> ARRAY[l.scope]))
    ORDER BY q.priority DESC, q.id
    LIMIT p_n FOR UPDATE OF q SKIP LOCKED;
END
$$;
