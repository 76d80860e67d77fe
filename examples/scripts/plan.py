"""Plan an article: a JSON list of section titles about the topic."""

import json
import sys
from pathlib import Path

topic, count, output = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
angles = ["Background", "How it works", "Trade-offs", "In practice", "Pitfalls", "Outlook",
          "Further reading", "Glossary"]
sections = [f"{angles[i % len(angles)]}: {topic}" for i in range(count)]
output.write_text(json.dumps({"topic": topic, "sections": sections}, indent=2), encoding="utf-8")
