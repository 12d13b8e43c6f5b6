"""Hooks for tests that must live in the core: fault-injection points on the commit path.

Nothing here acts unless a ``STREAMWARDEN_CHAOS_*`` variable names a point; never set them in production.
"""
