-- A store with history: pruned runs leave a receipt (where their hash chain ended), and what
-- a prune deletes by run is found by index (the cache index and commands; the outbox and the
-- queue have theirs).
CREATE TABLE pruned_runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    pipeline TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION NOT NULL,
    last_seq INTEGER NOT NULL,
    chain_head TEXT,
    pruned_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX task_cache_by_run ON task_cache (run_id);
CREATE INDEX commands_by_run ON commands (run_id);
