-- Rate limits shared by every process on this database (`interlock.storage.buckets_pg`).
-- A row per bucket: its name is a hash of a provider's endpoint and key (never the key),
-- then the model and the unit. Times are the server's epoch seconds, so processes whose
-- clocks disagree still agree on the bucket.
CREATE TABLE rate_buckets (
    name TEXT PRIMARY KEY,
    level DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    not_before DOUBLE PRECISION NOT NULL DEFAULT 0
);

-- `interlock.providers.buckets.step`, line for line, on a row locked for the statement:
-- refill since the last change (nothing refills during a hold), take `p_force` whatever
-- the level, hold everyone off for `p_hold` seconds (emptying the bucket), then hand out
-- between `p_need` and `p_want` units, or say how long until `p_need` can be had.
CREATE FUNCTION interlock_bucket_take(
    p_name TEXT, p_rate DOUBLE PRECISION, p_capacity DOUBLE PRECISION,
    p_need DOUBLE PRECISION, p_want DOUBLE PRECISION, p_force DOUBLE PRECISION,
    p_hold DOUBLE PRECISION)
RETURNS TABLE (granted DOUBLE PRECISION, wait_s DOUBLE PRECISION)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now DOUBLE PRECISION;
    v_level DOUBLE PRECISION;
    v_updated DOUBLE PRECISION;
    v_not_before DOUBLE PRECISION;
    v_needed DOUBLE PRECISION := least(p_need, p_capacity);
    v_granted DOUBLE PRECISION := 0;
    v_wait DOUBLE PRECISION := 0;
BEGIN
    -- The upsert locks the row (a new bucket starts full) until the transaction ends.
    INSERT INTO rate_buckets AS b (name, level, updated)
    VALUES (p_name, p_capacity, extract(epoch FROM clock_timestamp()))
    ON CONFLICT (name) DO UPDATE SET name = b.name
    RETURNING b.level, b.updated, b.not_before INTO v_level, v_updated, v_not_before;
    -- The time is read once the row is ours: read before, while another caller held the
    -- lock, it would be older than that caller's change, and the refill between them would
    -- be counted twice.
    v_now := greatest(v_updated, extract(epoch FROM clock_timestamp()));
    v_level := least(p_capacity,
        v_level + greatest(0, v_now - greatest(v_updated, v_not_before)) * p_rate);
    v_level := least(p_capacity, v_level - p_force);
    IF p_hold > 0 THEN
        v_not_before := greatest(v_not_before, v_now + p_hold);
        v_level := least(v_level, 0);
    END IF;
    IF p_need > 0 THEN
        IF v_now < v_not_before THEN
            v_wait := v_not_before - v_now + greatest(0, v_needed - v_level) / p_rate;
        ELSIF v_level >= v_needed THEN
            v_granted := greatest(p_need, least(p_want, v_level));
            v_level := v_level - v_granted;
        ELSE
            v_wait := (v_needed - v_level) / p_rate;
        END IF;
    END IF;
    UPDATE rate_buckets SET level = v_level, updated = v_now, not_before = v_not_before
    WHERE name = p_name;
    RETURN QUERY SELECT v_granted, v_wait;
END;
$$;
