"""kenneld integration tests (a package, so that this conftest never shadows another
directory's `conftest` module when several test directories run together)."""
