-- The runs list pages by (sort column, run_id); status, pipeline and creation time already have
-- their indexes (001), sorting by cost gets its own.
CREATE INDEX runs_by_cost ON runs (cost_usd DESC, run_id DESC);

-- What a search of the list reads: the id, the topic and the input values, one per line, kept
-- in the run's row so that a search reads one table (the inputs come with the first event).
ALTER TABLE runs ADD COLUMN search TEXT NOT NULL DEFAULT '';
UPDATE runs SET search = run_id || E'\n' || topic || coalesce(
    (SELECT E'\n' || string_agg(i.value, E'\n') FROM events e, jsonb_each_text(e.data -> 'inputs') i
     WHERE e.run_id = runs.run_id AND e.seq = 1), '');

CREATE FUNCTION interlock_run_search() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search := NEW.run_id || E'\n' || NEW.topic;
    RETURN NEW;
END $$;
CREATE TRIGGER runs_search_new BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION interlock_run_search();

CREATE FUNCTION interlock_run_search_inputs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET search = search || coalesce(
        (SELECT E'\n' || string_agg(value, E'\n') FROM jsonb_each_text(NEW.data -> 'inputs')), '')
    WHERE run_id = NEW.run_id;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_search_inputs AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.seq = 1) EXECUTE FUNCTION interlock_run_search_inputs();

-- A trigram index finds a searched substring without reading every run (tens of ms at 100,000
-- runs become one); where the pg_trgm extension cannot be had, a search reads every run.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        CREATE INDEX runs_search ON runs USING gin (search gin_trgm_ops);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pg_trgm cannot be created here: a search of the runs list reads every run';
END $$;
