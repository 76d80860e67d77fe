"""Assemble the sections, in plan order, under the article's title."""

import json
import sys
from pathlib import Path

output, inputs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
plan = json.loads(next(p for p in inputs if p.name.startswith("planner")).read_text())
sections = [p.read_text(encoding="utf-8").strip() for p in inputs if p.name.startswith("writer")]
parts = [f"# {plan['topic']}"] + [f"## {t}\n\n{s}" for t, s in zip(plan["sections"], sections)]
output.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
