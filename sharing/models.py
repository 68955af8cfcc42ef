"""Share links: read-only snapshots of a thread's branch (issue 55, DESIGN §6 *Share links*).

A :class:`ShareLink` names the thread and the branch's last message (``leaf``) as they were
when it was made: messages form a tree and are never overwritten, so the root → ``leaf`` path
is the snapshot — later messages, edits and regenerations are other nodes and never show.
Whether a public link may be made (and still works) is the workspace's
:class:`WorkspaceSharing` setting, off by default.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ShareLink(models.Model):
    """One link. ``token`` is the secret in the URL (``secrets.token_urlsafe``: 192 random
    bits); ``id`` names the link in the API so listing and revoking never need the secret
    again. A revoked link stays as a record (who, when)."""

    class Visibility(models.TextChoices):
        WORKSPACE = "workspace", _("Workspace members")
        PUBLIC = "public", _("Anyone with the link")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    token = models.CharField(max_length=64, unique=True)
    thread = models.ForeignKey("chat.Thread", on_delete=models.CASCADE, related_name="share_links")
    # The snapshot: the last message of the branch shown when the link was made.
    leaf = models.ForeignKey("chat.Message", on_delete=models.CASCADE, related_name="+")
    title = models.CharField(max_length=200, blank=True)
    visibility = models.CharField(max_length=12, choices=Visibility.choices, default=Visibility.WORKSPACE)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="share_links")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")

    class Meta:
        verbose_name = _("share link")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["thread", "revoked_at"], name="sharelink_thread_active")]

    def __str__(self) -> str:
        return f"{self.title or self.thread_id} ({self.visibility})"

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())


class WorkspaceSharing(models.Model):
    """A workspace's sharing setting: whether its members may make public links (anyone with
    the link, signed in or not, until the link's expiry). Off unless an administrator turns it
    on; turning it off again ends every public link of the workspace at once (checked when a
    link is opened, not only when it is made)."""

    workspace = models.OneToOneField("chat.Workspace", on_delete=models.CASCADE, primary_key=True,
                                     related_name="sharing")
    public_links = models.BooleanField(
        default=False, verbose_name=_("public links allowed"),
        help_text=_("Members may share a chat with anyone who has the link (signed in or not), until the link "
                    "expires. Turning this off ends every public link of the workspace at once."))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("workspace sharing setting")

    def __str__(self) -> str:
        return f"sharing of {self.workspace_id}"
