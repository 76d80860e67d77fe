-- Task concurrency keys (`concurrency:` of a worker): each attempt that waits for a slot of
-- its key or holds one, a row per task. A held slot counts while its run is live; the rows
-- of attempts that ended are dropped, also by whoever takes up a run whose driver died.
CREATE TABLE task_slots (
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    slot_key TEXT NOT NULL,
    asked_at REAL NOT NULL,
    held INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, task_id)
) WITHOUT ROWID;
CREATE INDEX task_slots_by_key ON task_slots (slot_key, held, asked_at)
