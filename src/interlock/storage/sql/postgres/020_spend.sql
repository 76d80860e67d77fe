-- Spend caps across runs (`interlock.storage.spend_pg`): what every process of the fleet
-- has spent, and holds for the calls under way, per cap and window (UTC epoch seconds).
-- A total's row is locked while a reservation checks it, so holds never over-commit.
CREATE TABLE spend_totals (
    cap TEXT NOT NULL,
    window_start DOUBLE PRECISION NOT NULL,
    spent_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (cap, window_start)
);

-- A hold: a call's worst case, until it settles or `expires` (a process that died).
CREATE TABLE spend_holds (
    hold TEXT NOT NULL,
    cap TEXT NOT NULL,
    window_start DOUBLE PRECISION NOT NULL,
    amount_usd DOUBLE PRECISION NOT NULL,
    expires DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (hold, cap)
);
CREATE INDEX spend_holds_cap ON spend_holds (cap, window_start);
