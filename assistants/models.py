"""A workspace assistant: a named preset of model, instructions, allowed tools, knowledge
scope and starter prompts that a chat runs under (DESIGN §6, *Workspace assistants*)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Assistant(models.Model):
    """One preset. ``tools``: tool names the creator's role could use when they were set
    (narrowed again at run time: the caller's role, and the creator's role now);
    ``knowledge_tags`` / ``knowledge_items``: the retrieval scope (both empty: the whole
    workspace); ``starter_prompts``: up to four questions shown on the landing page.
    ``visibility`` private (its owner only) or workspace (every member); ``featured`` and
    ``disabled`` are a workspace admin's (disabled: refused at every send, kept in threads)."""

    class Visibility(models.TextChoices):
        PRIVATE = "private", _("Only me")
        WORKSPACE = "workspace", _("Everyone in the workspace")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("chat.Workspace", on_delete=models.CASCADE, related_name="assistants")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="assistants")
    name = models.CharField(_("name"), max_length=80)
    description = models.CharField(_("description"), max_length=300, blank=True)
    provider = models.ForeignKey("agents.Provider", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    model = models.CharField(_("model"), max_length=200, blank=True)
    instructions = models.TextField(_("instructions"), blank=True)
    tools = models.JSONField(_("allowed tools"), default=list, blank=True)
    knowledge_tags = models.JSONField(_("knowledge tags"), default=list, blank=True)
    knowledge_items = models.JSONField(_("knowledge items"), default=list, blank=True)
    starter_prompts = models.JSONField(_("starter prompts"), default=list, blank=True)
    visibility = models.CharField(_("visibility"), max_length=12, choices=Visibility.choices,
                                  default=Visibility.PRIVATE)
    featured = models.BooleanField(_("featured"), default=False)
    disabled = models.BooleanField(_("disabled"), default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("assistant")
        verbose_name_plural = _("assistants")
        ordering = ["-featured", "name"]
        indexes = [models.Index(fields=["workspace", "visibility"], name="assistant_ws_visibility")]

    def __str__(self) -> str:
        return self.name

    @property
    def knowledge_scope(self) -> dict | None:
        if not self.knowledge_tags and not self.knowledge_items:
            return None
        return {"tags": list(self.knowledge_tags), "items": list(self.knowledge_items)}
