"""`python -m vlmlint`: the same command line as the `vlmlint` script."""

from vlmlint.cli import main

main()
