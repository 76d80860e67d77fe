"""Publish the newest draft with its last review score."""

import json
import sys
from pathlib import Path

output, inputs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
review = json.loads(next(p for p in inputs if p.name.startswith("reviewer")).read_text())
drafts = [p for p in inputs if p.name.startswith(("polisher", "translator"))]
body = drafts[-1].read_text(encoding="utf-8")
output.write_text(f"{body.rstrip()}\n\n---\nReview score: {review['score']}\n", encoding="utf-8")
