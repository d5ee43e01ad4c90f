"""`python -m fabmeter` is the same as the `fabmeter` command."""

from fabmeter.cli import main

main()
