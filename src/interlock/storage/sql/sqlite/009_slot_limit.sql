-- The limit of the key a run waits on, so that orchestrators looking for runs pass over
-- those whose key has no free slot.
ALTER TABLE runs ADD COLUMN slot_limit INTEGER
