-- The task queue shared by orchestrators and remote workers, and content-addressed artifacts.
CREATE TABLE task_queue (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,                      -- command, model or call
    tags TEXT[] NOT NULL DEFAULT '{}',       -- a worker must offer every tag listed
    scopes TEXT[] NOT NULL DEFAULT '{}',     -- pipeline:x, kind:y, model:z (for limits)
    priority INTEGER NOT NULL DEFAULT 0,     -- higher first
    payload JSONB NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',    -- queued, claimed, done, cancelled
    worker TEXT,
    delivery INTEGER NOT NULL DEFAULT 0,     -- grows with every hand-out: fences stale workers
    lease_expires DOUBLE PRECISION,
    result JSONB,
    output_sha TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    claimed_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    UNIQUE (run_id, task_id, attempt)
);
-- Claiming looks only at queued entries, best priority first, whatever the history size.
CREATE INDEX task_queue_ready ON task_queue (priority DESC, id) WHERE state = 'queued';
-- Expired hand-outs and the counts behind concurrency limits look only at claimed entries.
CREATE INDEX task_queue_claimed ON task_queue (lease_expires) WHERE state = 'claimed';
CREATE INDEX task_queue_claimed_scopes ON task_queue USING GIN (scopes) WHERE state = 'claimed';

CREATE TABLE queue_limits (
    scope TEXT PRIMARY KEY,                  -- pipeline:<name>, kind:<kind> or model:<alias>
    max_running INTEGER NOT NULL CHECK (max_running >= 0)
);

CREATE TABLE artifacts (
    sha256 TEXT PRIMARY KEY,
    size BIGINT NOT NULL,
    body BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
