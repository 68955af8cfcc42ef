"""Settings of the platforms the end-to-end tests start: the platform as ``make demo`` runs it
(``config.settings.local``), with one change — a cheap password hasher. PBKDF2's million
iterations are a quarter of a second of CPU per sign-in and per seeded user, and the suite
signs in hundreds of times on a two-core CI machine; no test here is about the hash's cost.
The benchmarks start theirs with ``config.settings.local`` itself."""

from config.settings.local import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
