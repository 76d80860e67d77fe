-- Consumers of the global event feed keep their position here, and notifications wait in an
-- outbox until a sender has delivered them (so a restart neither loses nor repeats one).
CREATE TABLE cursors (
    name TEXT PRIMARY KEY,
    position INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE outbox (
    key TEXT PRIMARY KEY,
    sink TEXT NOT NULL,
    run_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    claimed_by TEXT,
    claimed_until REAL,
    delivered_at REAL,
    last_error TEXT
) WITHOUT ROWID;
CREATE INDEX outbox_due ON outbox (next_at) WHERE delivered_at IS NULL;
