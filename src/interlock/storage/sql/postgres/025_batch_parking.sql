-- A hand-out whose model call waits in a provider batch. The worker holding it sets
-- `parked_at` as the call enters the wait (and clears `unparked_at`), and `unparked_at` when the
-- answer came, both by the database's clock; each change is announced on
-- `interlock_task_states` (`<id>:parked`, `<id>:unparked`). Whichever orchestrator drives the
-- run records the wait in its history from these columns (`task_batch_waited`), so the
-- attempt's timeout stops while it waits, also when that orchestrator started after the call
-- went into its batch. The hand-out stays claimed meanwhile: its lease is renewed as any other.
ALTER TABLE task_queue ADD COLUMN parked_at DOUBLE PRECISION;
ALTER TABLE task_queue ADD COLUMN unparked_at DOUBLE PRECISION;
