"""Fix the first issue the review found in the newest draft (one fix per round)."""

import json
import re
import sys
import textwrap
from pathlib import Path

output, inputs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
review = json.loads(next(p for p in inputs if p.name.startswith("reviewer")).read_text())
drafts = [p for p in inputs if p.name.startswith(("polisher", "translator"))]
draft = drafts[-1].read_text(encoding="utf-8")
first = review["issues"][0]["kind"] if review["issues"] else None
if first == "placeholder":
    draft = "\n".join(ln for ln in draft.splitlines() if "[interlock offline provider" not in ln)
elif first == "long-lines":
    draft = "\n".join(textwrap.fill(ln, 100) if len(ln) > 100 else ln for ln in draft.splitlines())
elif first == "double-spaces":
    draft = re.sub(r" {2,}", " ", draft)
elif first == "ending":
    draft = draft.rstrip() + ".\n"
output.write_text(draft.strip() + "\n", encoding="utf-8")
