-- Small outputs, content-addressed, committed in the same transaction as their completion:
-- the ledger alone then holds everything needed to restore a run directory.
CREATE TABLE artifacts (
    sha256 TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at REAL NOT NULL
) WITHOUT ROWID;
