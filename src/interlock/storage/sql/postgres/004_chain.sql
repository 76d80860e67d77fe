-- The hash chain: each event's link covers the previous one's (see interlock.storage.chain);
-- the run keeps the newest link so an append need not read the events back. Events recorded
-- before this migration keep a null hash: verification reports them as not chained.
ALTER TABLE events ADD COLUMN hash TEXT;
ALTER TABLE runs ADD COLUMN chain_head TEXT;
