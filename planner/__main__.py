"""`python -m planner` is the same as `plan`."""

from planner.cli import main

main()
