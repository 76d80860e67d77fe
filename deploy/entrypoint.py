#!/opt/interlock/bin/python
"""Run `interlock ARGS...` once the ledger's PostgreSQL accepts connections.

In a compose stack the database starts beside interlock, and `interlock` says at once that
a ledger cannot be opened. This waits up to INTERLOCK_WAIT_FOR_STORE seconds (60; 0 does
not wait) for the server of INTERLOCK_STORE, when that is a postgresql:// URL, and then
replaces itself with interlock.
"""

import os
import sys
import time


def wait_for_store(url: str, seconds: float) -> None:
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.Error as error:
            if time.monotonic() > deadline:
                reason = str(error).strip().splitlines()[0] if str(error).strip() else "no answer"
                print(
                    f"interlock-entrypoint: the store did not answer in {seconds:g} s ({reason});"
                    " check INTERLOCK_STORE and the database service",
                    file=sys.stderr,
                )
                sys.exit(75)
            time.sleep(0.5)


def main() -> None:
    url = os.environ.get("INTERLOCK_STORE", "")
    seconds = float(os.environ.get("INTERLOCK_WAIT_FOR_STORE", "60"))
    if seconds > 0 and url.startswith(("postgresql://", "postgres://")):
        wait_for_store(url, seconds)
    os.execvp("interlock", ["interlock", *sys.argv[1:]])


if __name__ == "__main__":
    main()
