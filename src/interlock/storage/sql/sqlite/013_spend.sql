-- Spend caps across runs (`interlock.storage.spend_sqlite`): what every process on this
-- ledger has spent, and holds for the calls under way, per cap and window (UTC epoch
-- seconds). A reservation runs in a write transaction, so holds never over-commit.
CREATE TABLE spend_totals (
    cap TEXT NOT NULL,
    window_start REAL NOT NULL,
    spent_usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (cap, window_start)
);

-- A hold: a call's worst case, until it settles or `expires` (a process that died).
CREATE TABLE spend_holds (
    hold TEXT NOT NULL,
    cap TEXT NOT NULL,
    window_start REAL NOT NULL,
    amount_usd REAL NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (hold, cap)
);
CREATE INDEX spend_holds_cap ON spend_holds (cap, window_start);
