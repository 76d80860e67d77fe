"""`python -m interlock` runs the command line."""

from interlock.cli.main import main

main()
