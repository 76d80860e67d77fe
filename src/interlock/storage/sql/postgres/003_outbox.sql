-- Consumers of the global event feed keep their position here, and notifications wait in an
-- outbox until a sender has delivered them (so a restart neither loses nor repeats one).
CREATE TABLE cursors (
    name TEXT PRIMARY KEY,
    position BIGINT NOT NULL
);

CREATE TABLE outbox (
    key TEXT PRIMARY KEY,
    sink TEXT NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    payload JSONB NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at DOUBLE PRECISION NOT NULL,
    claimed_by TEXT,
    claimed_until DOUBLE PRECISION,
    delivered_at DOUBLE PRECISION,
    last_error TEXT
);
CREATE INDEX outbox_due ON outbox (next_at, created_at, key) WHERE delivered_at IS NULL;
CREATE INDEX outbox_by_run ON outbox (run_id, created_at, key);
