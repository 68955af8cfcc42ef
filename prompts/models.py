"""The prompt library: reusable prompts with ``{{variables}}``, inserted with ``/command`` in
the chat composer (DESIGN §6 Prompt library)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class Prompt(models.Model):
    """A personal prompt (``workspace`` null: only ``owner`` sees it, in every workspace) or a
    workspace prompt (every member of ``workspace`` sees and uses it; ``owner`` is its author).
    ``command`` is unique per scope: among the owner's personal prompts, and among a
    workspace's shared prompts. ``body`` holds ``{{name}}`` / ``{{name|default}}`` variables
    (``prompts.variables``)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="prompts",
                              verbose_name=_("author"))
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, null=True, blank=True,
                                  related_name="prompts", verbose_name=_("shared with workspace"),
                                  help_text=_("Empty: a personal prompt, seen only by its author."))
    command = models.CharField(_("command"), max_length=40)
    title = models.CharField(_("title"), max_length=120)
    body = models.TextField(_("body"))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("prompt")
        verbose_name_plural = _("prompts")
        ordering = ["command", "-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "command"], condition=Q(workspace__isnull=True),
                                    name="prompt_unique_personal_command"),
            models.UniqueConstraint(fields=["workspace", "command"], condition=Q(workspace__isnull=False),
                                    name="prompt_unique_workspace_command"),
        ]
        indexes = [models.Index(fields=["owner", "workspace"])]

    def __str__(self) -> str:
        return f"/{self.command} ({self.title})"

    @property
    def is_shared(self) -> bool:
        return self.workspace_id is not None
