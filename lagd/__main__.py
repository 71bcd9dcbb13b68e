"""`python -m lagd` is the `lagd` command."""

from lagd.cli import main

raise SystemExit(main())
