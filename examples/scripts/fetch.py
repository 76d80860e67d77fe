"""Fetch the source text to translate: a file named by the topic, or a sample about it."""

import sys
from pathlib import Path

topic, output = sys.argv[1], Path(sys.argv[2])
source = Path(topic)
if source.is_file():
    text = source.read_text(encoding="utf-8")
else:
    text = (
        f"# {topic}\n\n"
        f"This is the source text about {topic}.  It is written in plain English so that the "
        "translator has something concrete to work with, and it is long enough to show how the "
        "review and polish loop improves a draft over several rounds.\n\n"
        "Reviews score the draft; a low score sends it back for polishing, at most twice.\n"
    )
output.write_text(text, encoding="utf-8")
