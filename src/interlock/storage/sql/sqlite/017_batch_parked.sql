-- Rows whose run only waits for provider-batch answers: the run's summary says so (kept
-- with every append, as its status is), and a batch says how many such rows do not count
-- against its concurrency.
ALTER TABLE runs ADD COLUMN batch_parked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN batch_waiting INTEGER NOT NULL DEFAULT 1000;
