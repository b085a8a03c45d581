"""`python -m worldeval.cli` runs the `worldeval` command."""

from worldeval.cli import main

main()
