"""End-to-end tests: the platform as real processes (see harness.py)."""
