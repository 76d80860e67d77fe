-- What a search of the runs list reads: the id, the topic and the input values, one per line,
-- kept in the run's row so that a search reads one table (the inputs come with the first event).
ALTER TABLE runs ADD COLUMN search TEXT NOT NULL DEFAULT '';
UPDATE runs SET search = run_id || char(10) || topic || coalesce((SELECT char(10) || (SELECT group_concat(value, char(10)) FROM json_each(e.data, '$.inputs')) FROM events e WHERE e.run_id = runs.run_id AND e.seq = 1), '');
CREATE TRIGGER runs_search_new AFTER INSERT ON runs BEGIN UPDATE runs SET search = NEW.run_id || char(10) || NEW.topic WHERE run_id = NEW.run_id; END;
CREATE TRIGGER runs_search_inputs AFTER INSERT ON events WHEN NEW.seq = 1 BEGIN UPDATE runs SET search = search || coalesce(char(10) || (SELECT group_concat(value, char(10)) FROM json_each(NEW.data, '$.inputs')), '') WHERE run_id = NEW.run_id; END;
-- The list pages by (sort column, run_id): an index per sort, and per filter with the default
-- sort, so a page is a range scan however many runs the store holds. The sorts' indexes hold
-- the search text too: a search walks the index alone, never the table's rows.
DROP INDEX IF EXISTS runs_by_status;
CREATE INDEX runs_by_status ON runs (status, created_at, run_id);
CREATE INDEX runs_by_pipeline ON runs (pipeline, created_at, run_id);
DROP INDEX IF EXISTS runs_by_created;
CREATE INDEX runs_by_created ON runs (created_at, run_id, search);
CREATE INDEX runs_by_cost ON runs (cost_usd, run_id, search)
