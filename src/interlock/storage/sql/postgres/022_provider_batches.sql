-- Batches sent to providers' batch APIs (`interlock.storage.provider_batches`), recorded
-- before they are sent, and the model calls waiting in them (UTC epoch seconds).
CREATE TABLE provider_batches (
    tag TEXT PRIMARY KEY,              -- interlock's name, kept by the provider
    provider TEXT NOT NULL,
    kind TEXT NOT NULL,                -- openai | anthropic
    alias TEXT NOT NULL,
    state TEXT NOT NULL,               -- submitting | submitted | ended | cancelled
    provider_batch_id TEXT NOT NULL DEFAULT '',
    provider_status TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    submitted_at DOUBLE PRECISION,
    ended_at DOUBLE PRECISION
);
CREATE INDEX provider_batches_state ON provider_batches (state);

-- One call, keyed by its idempotency key (run, task, attempt): a restarted attempt finds it.
CREATE TABLE provider_batch_requests (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    alias TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,               -- gathered | batched | done | failed | withdrawn
    created_at DOUBLE PRECISION NOT NULL,
    run_id TEXT NOT NULL DEFAULT '',
    task_id TEXT NOT NULL DEFAULT '',
    tag TEXT NOT NULL DEFAULT '',
    answer TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    retryable BOOLEAN NOT NULL DEFAULT TRUE
);
CREATE INDEX provider_batch_requests_gathered ON provider_batch_requests (provider, alias, state);
CREATE INDEX provider_batch_requests_tag ON provider_batch_requests (tag);
CREATE INDEX provider_batch_requests_run ON provider_batch_requests (run_id);
