-- A batch's tolerance for failed rows (`interlock batch ... --tolerate N|P%`): a count of
-- rows ('5') or a percentage of them ('10%'); NULL: no tolerance given, every row starts
-- however many fail. Past it, no more rows start and the batch is failed.
ALTER TABLE batches ADD COLUMN tolerate TEXT;
