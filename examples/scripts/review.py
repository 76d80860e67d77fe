"""Score the newest draft from 0 to 10 and list what to fix, as JSON.

The checks are deterministic so the same draft always gets the same score:
placeholder text, lines over 100 characters, doubled spaces, a missing final sentence stop.
"""

import json
import sys
from pathlib import Path

output, inputs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
drafts = [p for p in inputs if p.name.startswith(("polisher", "translator"))]
draft = drafts[-1].read_text(encoding="utf-8")  # the newest draft is the last input
issues = []
if "[interlock offline provider" in draft:
    issues.append({"kind": "placeholder", "penalty": 1.5, "detail": "placeholder label left in"})
long_lines = sum(len(line) > 100 for line in draft.splitlines())
if long_lines:
    issues.append({"kind": "long-lines", "penalty": min(1.0, 0.5 * long_lines),
                   "detail": f"{long_lines} line(s) over 100 characters"})
if "  " in draft:
    issues.append({"kind": "double-spaces", "penalty": 1.0, "detail": "doubled spaces"})
if not draft.rstrip().endswith((".", "!", "?")):
    issues.append({"kind": "ending", "penalty": 0.5, "detail": "does not end with a full stop"})
score = round(10.0 - sum(i["penalty"] for i in issues), 2)
output.write_text(json.dumps({"score": score, "issues": issues, "draft": drafts[-1].name},
                             indent=2), encoding="utf-8")
