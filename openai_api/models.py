"""Records of the OpenAI-compatible API.

* ``ApiThread`` marks a thread created through the API and remembers a digest of the
  conversation as the client knows it after the last answer, so a client that resends
  the whole history (what OpenAI clients do) continues the same thread.
* ``ApiRun`` holds the tools an API client declared for one run (``agents/client_tools.py``
  offers them to the model; the platform never executes them).
"""

from django.conf import settings
from django.db import models


class ApiThread(models.Model):
    thread = models.OneToOneField("chat.Thread", on_delete=models.CASCADE, related_name="api_thread")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    client = models.CharField(max_length=200, blank=True, help_text="User-Agent of the client that created it.")
    digest = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API-created thread"

    def __str__(self) -> str:
        return f"API thread {self.thread_id}"


class ApiRun(models.Model):
    run = models.OneToOneField("agents.Run", on_delete=models.CASCADE, primary_key=True, related_name="+")
    tools = models.JSONField(default=list, blank=True, help_text="[{name, description, parameters}]")

    class Meta:
        verbose_name = "API run"

    def __str__(self) -> str:
        return f"API run {self.run_id}"
