"""A stand-in for an agent command-line tool; the first argument selects its behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main() -> int:
    """Behave as told by sys.argv[1] and return the exit status."""
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "report":  # print what arrived as arguments and on stdin
        print(json.dumps({"argv": rest, "stdin": sys.stdin.read()}))
        return 0
    if mode == "stream":  # several lines, flushed one by one
        for line in ("first line\n", "second line\n", "déjà vu\n"):
            sys.stdout.write(line)
            sys.stdout.flush()
            time.sleep(0.02)
        return 0
    if mode == "fail":
        sys.stderr.write("noise\n" * 1000 + "fatal: model quota exhausted\n")
        return 3
    if mode == "flood":  # print without end, as a runaway agent does
        line = "x" * 1000 + "\n"
        while True:
            sys.stdout.write(line)
    if mode == "silent":
        return 0
    if mode == "env":  # print the environment it was given
        print(json.dumps(dict(os.environ)))
        return 0
    if mode == "leak":  # fail, quoting the key it was given
        sys.stderr.write(f"auth failed for key {os.environ.get(rest[0], '')}\n")
        return 1
    if mode == "hang":  # start a helper process, record its pid, then never finish
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(rest[0], "w", encoding="utf-8") as handle:
            handle.write(str(helper.pid))
        print("partial output", flush=True)
        time.sleep(60)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
