-- The runs an orchestrator may take (`unowned_runs`): live ones, and ended ones whose driver
-- died before acting on the end. A handful among a history of finished runs: without this
-- index each look read every run ever recorded (10 ms at 100,000 runs, and more as the
-- history grows), and a fleet looks whenever a run is handed back.
CREATE INDEX runs_to_take ON runs (created_at, run_id)
    WHERE status IN ('running', 'waiting', 'paused')
       OR (status = 'delivered' AND lease_owner IS NOT NULL);
