-- Experiments (`interlock batch ... --variant NAME=FILE`): the same rows through several
-- pipelines, one batch per variant. `experiment` is the id of the experiment's base batch
-- (NULL for a batch of its own), `variant` the variant's name (`base` for the base batch).
ALTER TABLE batches ADD COLUMN experiment TEXT;
ALTER TABLE batches ADD COLUMN variant TEXT;
CREATE INDEX batches_experiment ON batches (experiment) WHERE experiment IS NOT NULL;
