"""Workspaces, memberships, threads and messages.

Messages are stored in a provider-neutral canonical format; the adapters in
``llm/`` translate them to each provider's wire format (DESIGN §4).
"""

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class Workspace(models.Model):
    """A team. Users see only the workspaces they are members of."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    instructions = models.TextField(
        blank=True, max_length=4000,
        help_text="Workspace instructions: given to the assistant in every chat of this workspace as "
                  "context (never as a user's words), e.g. house style or what the team works on.",
    )
    # The model a new chat of this workspace starts with unless the member chose their own
    # (agents.selectors.default_model_for). Empty: the first configured real provider.
    default_provider = models.ForeignKey(
        "agents.Provider", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="New chats in this workspace start on this provider (unless a member chose their own default). "
                  "Empty: the first configured real provider, else Offline.",
    )
    default_model = models.CharField(
        max_length=200, blank=True,
        help_text="Model of the default provider; empty: the provider's default model.",
    )
    # Artifacts (issue 55): an answer's HTML, SVG and Mermaid code blocks get a Preview that renders
    # them in a sandboxed frame (chat.artifacts). Off: no Preview button and the frame is refused.
    artifacts_enabled = models.BooleanField(
        _("artifact previews"), default=True,
        help_text=_("Show a Preview button on HTML, SVG and Mermaid code blocks of answers, rendered in a "
                    "sandboxed frame beside the chat. Off: no previews in this workspace."),
    )
    # Admin-blind chats (chat.selectors.thread_get_for_user): admins and staff see a member's
    # chat's metadata, usage and tool ledger, never its content, unless a second admin approved a
    # break-glass request (BreakGlassRequest). On for every new workspace; workspaces that
    # existed before the setting keep admin read access until an admin switches it on
    # (migration 0012 stores False for them).
    admin_blind = models.BooleanField(
        default=True, verbose_name=_("admin-blind chats"),
        help_text=_("Admins see a member's chats' metadata, usage and tool ledger, not their messages, "
                    "attachments or tool arguments. Reading one takes a break-glass request approved by a "
                    "second admin of this workspace; the owner is told."),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class UserPreferences(models.Model):
    """A person's chat preferences. ``custom_instructions`` (≤ 4000 chars) go to the assistant
    in every chat as context, never as the user's words."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_preferences")
    custom_instructions = models.TextField(blank=True, max_length=4000)
    # The model this person's new chats start with (agents.selectors.default_model_for); null:
    # the workspace's default.
    default_provider = models.ForeignKey("agents.Provider", null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="+")
    default_model = models.CharField(max_length=200, blank=True)
    # The language of this person's pages and messages (a code of settings.LANGUAGES: "de",
    # "zh-hans"…); "": the browser's (Accept-Language). chat.language keeps it in the session.
    language = models.CharField(max_length=16, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"preferences of {self.user}"


class Membership(models.Model):
    """A user's role in one workspace."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    role = models.ForeignKey("agents.Role", on_delete=models.PROTECT, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "workspace"], name="membership_unique_user_workspace")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} as {self.role}"


class Thread(models.Model):
    """A conversation. Visible to its owner; workspace admins may read it."""

    class PromptTier(models.TextChoices):
        AUTO = "auto", pgettext_lazy("prompt tier", "Auto")
        FULL = "full", pgettext_lazy("prompt tier", "Full")
        SMALL = "small", pgettext_lazy("prompt tier", "Small")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="threads")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="threads")
    title = models.CharField(max_length=200, blank=True)
    provider = models.ForeignKey("agents.Provider", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    model = models.CharField(max_length=200, blank=True)
    # The workspace assistant (a preset: instructions, tools, knowledge scope) the chat runs
    # under; picked like a model, cleared by picking a plain model (agents.presets).
    assistant = models.ForeignKey("assistants.Assistant", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    grounded = models.BooleanField(default=True)
    allow_model_save = models.BooleanField(default=False)
    include_private_in_ai = models.BooleanField(default=False)
    ui_context = models.JSONField(default=dict, blank=True)
    prompt_tier = models.CharField(max_length=8, choices=PromptTier.choices, default=PromptTier.AUTO)
    # The newest message of the selected branch: the conversation the user sees and the
    # history the provider receives run from the root to this message (chat/branches.py).
    leaf = models.ForeignKey("Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    pinned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)
    # A temporary chat is not kept: never listed or searched, never titled by its model, seen
    # only by its owner, deleted when closed or CHAT_TEMPORARY_TTL_S after its last activity
    # (agents.temporary_chats, by the reaper). Its usage records stay (they hold no key to it).
    temporary = models.BooleanField(default=False)
    # A title is written from the conversation (by its owner or by the model) and can carry its
    # content: in an admin-blind workspace admins see it only when the owner opts in.
    title_visible_to_admins = models.BooleanField(default=False)
    # The owner's own organisation of their chats (chat.organise): at most one folder, any
    # number of tags. Deleting a folder puts its chats back in the list (SET_NULL).
    folder = models.ForeignKey("Folder", null=True, blank=True, on_delete=models.SET_NULL, related_name="threads")
    tags = models.ManyToManyField("Tag", blank=True, related_name="threads")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="thread_owner_recent"),
            # The reaper's look-up of expired temporary chats: only those rows.
            models.Index(fields=["updated_at"], name="thread_temporary_recent", condition=models.Q(temporary=True)),
        ]

    def __str__(self) -> str:
        # A row's name in generic places (the Django admin's breadcrumbs, checkboxes and foreign
        # keys, logs) carries no content: a title can (admin-blind chats, issue 57).
        return self.title if self.title and self.title_visible_to_admins else f"Thread {self.pk}"

    @property
    def group_name(self) -> str:
        """The Channels group that carries this thread's events."""
        return f"thread.{self.pk}"


class Folder(models.Model):
    """A person's folder of their own chats in one workspace (``chat.organise``): seen and
    used only by its owner while they belong to the workspace. ``collapsed``: the rail shows
    only its name. Names are unique per owner and workspace, case-insensitively."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_folders")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    # The name as compared (chat.organise.name_key: NFKC, case-folded): the same on SQLite
    # and PostgreSQL, whose lower() disagree beyond ASCII.
    key = models.CharField(max_length=400)
    collapsed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["key", "created_at"]
        constraints = [models.UniqueConstraint(fields=["owner", "workspace", "key"], name="folder_unique_name")]

    def __str__(self) -> str:
        return self.name


class Tag(models.Model):
    """One of a person's tags (``chat.organise``): a label they put on any of their chats.
    Names are unique per owner case-insensitively (the first spelling is kept); a tag no chat
    carries any more is deleted."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_tags")
    name = models.CharField(max_length=50)
    key = models.CharField(max_length=200)  # as Folder.key
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="tag_unique_name")]

    def __str__(self) -> str:
        return self.name


class Message(models.Model):
    """One message in canonical form.

    Messages form a tree through ``parent`` (the message before this one in its branch):
    an edited question or a regenerated answer is a sibling of the version it replaces, so
    nothing is ever overwritten. ``position`` is the append order in the thread (unique).
    ``tool_calls`` is ``[{"id": str, "name": str, "arguments": str}]`` where ``arguments`` is
    the JSON text the model produced ("{}" when it produced none); tool messages carry
    ``tool_call_id`` and the model-facing result in ``content``.
    """

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        SYSTEM = "system"

    class Status(models.TextChoices):
        COMPLETE = "complete"
        STREAMING = "streaming"
        TRUNCATED = "truncated"
        ERROR = "error"
        CANCELLED = "cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey("agents.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages")
    position = models.PositiveIntegerField()
    # No database constraint: deleting one message must not cut its branch in two (SET_NULL
    # would make its children roots). A parent that no longer exists is read as "the message
    # before this one" (chat.selectors.message_branch_for_thread).
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                               related_name="children")
    # The child last shown below this message: going back to this version of the
    # conversation shows the answer the user was last looking at (LibreChat behaviour).
    selected_child = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING,
                                       db_constraint=False, related_name="+")
    role = models.CharField(max_length=12, choices=Role.choices)
    content = models.TextField(blank=True)
    # Hidden reasoning ("thinking"): stored apart, never shown as the answer.
    reasoning = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    is_error = models.BooleanField(default=False)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.COMPLETE)
    citations = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    error = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["thread", "position"]
        constraints = [models.UniqueConstraint(fields=["thread", "position"], name="message_unique_position")]

    def __str__(self) -> str:
        return f"{self.role} message #{self.position}"  # no content: see Thread.__str__


class Attachment(models.Model):
    """A file attached to a user message (``chat.attachments``).

    Uploaded first (``message`` is None: pending, seen only by its owner, in the composer),
    then bound to the message it was sent with, in the send's transaction. The bytes are in
    its :class:`AttachmentBlob` (a row of their own: binding, listing and reading a thread
    never copy or load them — SQLite rewrites a whole row on any update); documents keep the
    ``text`` extracted from them here (given to the model as labelled context with the
    message). The bytes live in the database, like knowledge uploads: every web and worker
    process reads the same rows, nothing to share on disk.
    """

    class Kind(models.TextChoices):
        IMAGE = "image"
        DOCUMENT = "document"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="attachments")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_attachments")
    message = models.ForeignKey(Message, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    filename = models.CharField(max_length=255)
    # The type the bytes are (detected, never the client's word): image/png, application/pdf, …
    content_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField(help_text="bytes")
    model_content_type = models.CharField(max_length=100, blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["owner", "message", "created_at"], name="attachment_owner_pending")]

    def __str__(self) -> str:
        return self.filename


class AttachmentBlob(models.Model):
    """An attachment's bytes: ``data`` as uploaded; an image's WebP ``thumbnail`` and, when the
    original is larger than a model takes, a smaller ``model_data`` copy (its type is the
    attachment's ``model_content_type``)."""

    attachment = models.OneToOneField(Attachment, primary_key=True, on_delete=models.CASCADE, related_name="blob")
    data = models.BinaryField()
    thumbnail = models.BinaryField(blank=True, default=b"")
    model_data = models.BinaryField(blank=True, default=b"")

    def __str__(self) -> str:
        return f"bytes of {self.attachment_id}"


class BreakGlassRequest(models.Model):
    """An admin's request to read one member's chat in an admin-blind workspace (chat.breakglass).

    ``pending`` until a SECOND admin of the workspace approves or denies it, or until
    ``expires_at`` (``BREAK_GLASS_REQUEST_TTL_S`` after it was made). Approved, it lets the
    requester — no one else — read that thread, read-only, until ``access_until``
    (``BREAK_GLASS_ACCESS_S`` after approval); every read is a :class:`BreakGlassRead`. The
    thread's owner sees every approved request (who, why, when). Rows outlive the thread
    (``thread`` SET_NULL; ``thread_ref`` keeps its id) so the audit survives a deletion.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        REVOKED = "revoked", "Revoked"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="break_glass_requests")
    thread = models.ForeignKey(Thread, null=True, on_delete=models.SET_NULL, related_name="break_glass_requests")
    thread_ref = models.UUIDField(db_index=True)
    thread_owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(max_length=2000)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.CharField(max_length=500, blank=True)
    access_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["requested_by", "thread", "status"], name="breakglass_grant_lookup")]

    def __str__(self) -> str:
        return f"break-glass {self.pk} ({self.status})"


class BreakGlassRead(models.Model):
    """One read under an approved :class:`BreakGlassRequest`: who, when, what (``what``: the
    path that read it — ``messages``, ``export:json``, ``page``, ``attachment:<id>``…)."""

    request = models.ForeignKey(BreakGlassRequest, on_delete=models.CASCADE, related_name="reads")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    what = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at"]

    def __str__(self) -> str:
        return f"{self.user} read {self.what} at {self.at:%Y-%m-%d %H:%M:%S}"
