"""Self-service API keys: named, optionally expiring, stored hashed, revocable by their owner
and by administrators; accepted at every door through ``chatplatform.credentials``."""
