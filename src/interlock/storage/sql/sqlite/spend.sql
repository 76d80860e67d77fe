-- Queries of the spend caps (`interlock.storage.spend_sqlite`).

-- name: lock_total
-- Creates the total of a cap's window if it is new, and (PostgreSQL) locks its row.
INSERT INTO spend_totals (cap, window_start, spent_usd) VALUES (?, ?, 0)
ON CONFLICT (cap, window_start) DO UPDATE SET spent_usd = spend_totals.spent_usd
RETURNING spent_usd;

-- name: drop_expired
DELETE FROM spend_holds WHERE cap = ? AND window_start = ? AND expires <= ?;

-- name: held
SELECT coalesce(sum(amount_usd), 0) FROM spend_holds WHERE cap = ? AND window_start = ?;

-- name: add_hold
INSERT INTO spend_holds (hold, cap, window_start, amount_usd, expires) VALUES (?, ?, ?, ?, ?);

-- name: drop_hold
DELETE FROM spend_holds WHERE hold = ? AND cap = ?;

-- name: add_spent
INSERT INTO spend_totals (cap, window_start, spent_usd) VALUES (?, ?, ?)
ON CONFLICT (cap, window_start) DO UPDATE SET spent_usd = spend_totals.spent_usd + excluded.spent_usd;

-- name: usage
SELECT t.cap, t.window_start, t.spent_usd,
       coalesce(sum(h.amount_usd), 0), count(h.hold)
FROM spend_totals t
LEFT JOIN spend_holds h ON h.cap = t.cap AND h.window_start = t.window_start AND h.expires > ?
GROUP BY t.cap, t.window_start, t.spent_usd
ORDER BY t.cap, t.window_start;
