-- A store with history: pruned runs leave a receipt (where their hash chain ended), and what
-- a prune deletes by run is found by index (the outbox, the cache index and commands).
CREATE TABLE pruned_runs (
    run_id TEXT PRIMARY KEY,
    pipeline TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    last_seq INTEGER NOT NULL,
    chain_head TEXT,
    pruned_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX outbox_by_run ON outbox (run_id);
CREATE INDEX task_cache_by_run ON task_cache (run_id);
CREATE INDEX commands_by_run ON commands (run_id)
