-- Whether some call of the run had its tokens, so its cost, estimated (the server reported
-- no usage), kept in the run's row so that listings mark the cost without reading history;
-- and for a batch row, whether its earlier tries' spend (`spent_before`) was.
ALTER TABLE runs ADD COLUMN estimated BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE batch_rows ADD COLUMN estimated_before BOOLEAN NOT NULL DEFAULT false;
UPDATE runs SET estimated = true WHERE run_id IN (
    SELECT e.run_id FROM events e
    WHERE e.kind IN ('task_completed', 'task_failed', 'usage_recorded')
      AND e.data -> 'usage' ->> 'estimated' = 'true'
);
