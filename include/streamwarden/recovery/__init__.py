"""Recovery: its Params, its plan (the blast radius), and restoring the tables with their offsets."""
