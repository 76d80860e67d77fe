-- The cache index: completed tasks of workers with `cache:` by fingerprint, so that a later
-- run of the same store can carry their outputs over (see interlock.runtime.reuse).
CREATE TABLE task_cache (
    fingerprint TEXT NOT NULL,
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    artifact TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    value_json TEXT NOT NULL,
    completed_at REAL NOT NULL,
    PRIMARY KEY (fingerprint, run_id, task_id)
) WITHOUT ROWID;
CREATE INDEX task_cache_age ON task_cache (completed_at);
