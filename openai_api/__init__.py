"""The OpenAI-compatible API (``/v1/chat/completions``, ``/v1/models``): any OpenAI client
talks to the platform, and every request runs as a platform run of the caller."""
