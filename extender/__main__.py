"""`python -m extender` is the same as the `gang-extender` command."""

from extender.cli import main

raise SystemExit(main())
