-- Concurrency keys: the key a run waits on or holds a slot of (`concurrency:` of its
-- pipeline), and whether it holds one. Runs holding a slot count until they end.
ALTER TABLE runs ADD COLUMN slot_key TEXT;
ALTER TABLE runs ADD COLUMN slot_held INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_slot_key ON runs (slot_key, created_at) WHERE slot_key IS NOT NULL
