"""The soak: the whole local platform for an hour under a seeded plan of faults, then a verdict (docs/soak.md)."""
