-- Batches (`interlock batch`): one run per row of a dataset. A batch and all its rows are
-- written in one transaction before any run starts; a row's run id is derived from the batch
-- and the row (and its try), and is recorded on the row before the run is made, so that a
-- row's try can never get two runs. `driver`/`driver_expires`: the process driving the batch.
CREATE TABLE batches (
    batch_id TEXT PRIMARY KEY,
    pipeline TEXT NOT NULL,
    definition_hash TEXT NOT NULL REFERENCES definitions (hash),
    source TEXT NOT NULL,
    inputs_file TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    max_cost_usd REAL,
    row_count INTEGER NOT NULL,
    created_at REAL NOT NULL,
    cancelled_at REAL,
    driver TEXT,
    driver_expires REAL
);
CREATE TABLE batch_rows (
    batch_id TEXT NOT NULL REFERENCES batches (batch_id),
    row_no INTEGER NOT NULL,
    topic TEXT NOT NULL,
    inputs TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    tries INTEGER NOT NULL DEFAULT 1,
    run_id TEXT,
    started_at REAL,
    error TEXT,
    result TEXT,
    spent_before REAL NOT NULL DEFAULT 0,
    tokens_before INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, row_no)
) WITHOUT ROWID
