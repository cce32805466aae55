"""`python -m harness.bench <name> ...`: the benchmarks' command line (harness.bench.main)."""

from . import main

raise SystemExit(main())
