-- The ledger: runs, their append-only events, pinned definitions, and people's commands.
-- run_id uses the "C" collation so prefix searches are plain index range scans.
CREATE TABLE definitions (
    hash TEXT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    pipeline TEXT NOT NULL,
    topic TEXT NOT NULL,
    definition_hash TEXT NOT NULL REFERENCES definitions (hash),
    source TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    phase TEXT,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    tokens BIGINT NOT NULL DEFAULT 0,
    warnings INTEGER NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL,
    lease_owner TEXT,
    lease_token BIGINT NOT NULL DEFAULT 0,
    lease_expires DOUBLE PRECISION,
    lease_acquired_at DOUBLE PRECISION,
    lease_renewed_at DOUBLE PRECISION
);
-- Listings filter by status or pipeline and show the newest first.
CREATE INDEX runs_by_status ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_by_pipeline ON runs (pipeline, created_at DESC, run_id DESC);
CREATE INDEX runs_by_created ON runs (created_at DESC, run_id DESC);
-- Orchestrators look for live runs whose lease is free or expired.
CREATE INDEX runs_live ON runs (lease_expires) WHERE status IN ('running', 'paused');

CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    seq INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    data JSONB NOT NULL,
    rule TEXT,
    why TEXT,
    UNIQUE (run_id, seq)  -- also "a run's events since seq N", whatever the history size
);

CREATE TABLE commands (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    kind TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    by TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    consumed_at DOUBLE PRECISION
);
CREATE INDEX commands_pending ON commands (run_id, id) WHERE consumed_at IS NULL;
