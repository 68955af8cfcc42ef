"""chatplatform's plumbing library: database helpers, errors, pub/sub, the channel layer,
input limits, middleware. It imports no app; the composition root is ``config``."""
