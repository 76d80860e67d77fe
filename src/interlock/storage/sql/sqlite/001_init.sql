-- The ledger: runs, their append-only events, pinned definitions, and people's commands.
CREATE TABLE definitions (
    hash TEXT PRIMARY KEY,
    body TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    pipeline TEXT NOT NULL,
    topic TEXT NOT NULL,
    definition_hash TEXT NOT NULL REFERENCES definitions (hash),
    source TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    phase TEXT,
    cost_usd REAL NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    warnings INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires REAL,
    lease_acquired_at REAL,
    lease_renewed_at REAL
);
CREATE INDEX runs_by_status ON runs (status, created_at);
CREATE INDEX runs_by_created ON runs (created_at);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    rule TEXT,
    why TEXT,
    UNIQUE (run_id, seq)
);

CREATE TABLE commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    kind TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    by TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    consumed_at REAL
);
CREATE INDEX commands_pending ON commands (run_id) WHERE consumed_at IS NULL;
