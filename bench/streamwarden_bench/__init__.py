"""Streamwarden benchmark harness: one seeded workload, a raw baseline, the real job and a peer, side by side."""
