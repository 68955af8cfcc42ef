"""Test fakes for external services (e.g. an OpenAI-compatible HTTP server)."""
