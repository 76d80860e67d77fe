-- A count of the changes made to a batch's rows by anyone but its driver (`batch retry`,
-- `batch cancel`, the API): a driver keeps the rows it read and rereads only those in
-- flight, and reads them all again when this count moved.
ALTER TABLE batches ADD COLUMN changes BIGINT NOT NULL DEFAULT 0;
