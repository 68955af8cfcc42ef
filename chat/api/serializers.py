"""Serializers for threads, messages and runs. Shapes only; logic lives in services."""

from __future__ import annotations

import datetime
import uuid

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.approvals.requests import approval_fields
from agents.models import Provider, Run, ToolCall
from agents.presentation import error_for_viewer, tool_call_presentation
from chat.models import Attachment, Folder, Message, Thread, Workspace
from chat.organise import thread_tag_names
from chat.rendering import render_markdown
from chat.selectors import thread_title_for


class WorkspaceSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = ["id", "slug", "name", "role", "artifacts_enabled"]
        read_only_fields = ["artifacts_enabled"]

    def get_role(self, obj) -> str | None:
        roles = self.context.get("roles", {})
        return roles.get(obj.pk)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean and nothing else: DRF's BooleanField also takes "yes", "1", 0, …"""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        self.fail("invalid")


class WorkspaceUpdateSerializer(serializers.Serializer):
    """``PATCH /api/v1/workspaces/{id}/``: the settings a workspace admin changes."""

    artifacts_enabled = StrictBooleanField(
        help_text="Artifact previews: a Preview button on answers' HTML, SVG and Mermaid code blocks.")


class ThreadSerializer(serializers.ModelSerializer):
    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    provider = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    leaf_id = serializers.UUIDField(read_only=True, allow_null=True,
                                    help_text="The last message of the selected branch.")
    folder = serializers.SerializerMethodField(
        help_text="The id of the owner's folder this chat is in, or null (null to anyone but its owner).")
    tags = serializers.SerializerMethodField(
        help_text="The owner's tags on this chat, by name ([] to anyone but its owner).")
    assistant = serializers.UUIDField(source="assistant_id", read_only=True, allow_null=True,
                                      help_text="The workspace assistant the chat runs under, or null.")
    assistant_name = serializers.CharField(source="assistant.name", read_only=True, allow_null=True, default=None,
                                           help_text="That assistant's name (what the rail shows), or null.")
    blinded = serializers.SerializerMethodField(
        help_text="True when the caller is an admin who sees this chat's metadata only (admin-blind "
                  "workspace, no open break-glass grant): title \"\" unless the owner opened it, ui_context {}.")
    break_glass_until = serializers.SerializerMethodField(
        help_text="When the caller reads under a break-glass grant: when that access ends; else null.")

    class Meta:
        model = Thread
        fields = [
            "id", "workspace", "title", "title_visible_to_admins", "provider", "model", "assistant", "assistant_name",
            "grounded", "allow_model_save", "include_private_in_ai", "ui_context", "prompt_tier", "pinned",
            "archived", "temporary", "folder", "tags", "leaf_id", "blinded", "break_glass_until", "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_blinded(self, obj) -> bool:
        return bool(getattr(obj, "blinded", False))

    def get_break_glass_until(self, obj) -> datetime.datetime | None:
        grant = getattr(obj, "break_glass", None)
        return grant.access_until if grant is not None else None

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if getattr(instance, "blinded", False):  # metadata only (chat.selectors.thread_get_for_user)
            data["title"] = thread_title_for(instance, blinded=True)
            data["ui_context"] = {}
        return data

    def _owner_reads(self, obj) -> bool:
        """Folders and tags are the owner's own: a workspace admin reading the chat
        (``context["viewer"]``) does not see them."""
        viewer = self.context.get("viewer")
        return viewer is None or viewer.pk == obj.owner_id

    def get_folder(self, obj) -> uuid.UUID | None:
        return obj.folder_id if self._owner_reads(obj) else None

    def get_tags(self, obj) -> list[str]:
        return thread_tag_names(obj) if self._owner_reads(obj) else []


class ThreadCreateSerializer(serializers.Serializer):
    workspace = serializers.CharField(help_text="Workspace slug or id.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    provider = serializers.SlugRelatedField(
        slug_field="slug", queryset=Provider.objects.filter(enabled=True), required=False, allow_null=True
    )
    model = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    assistant = serializers.UUIDField(required=False, allow_null=True,
                                      help_text="A workspace assistant: the chat runs under it, on its model "
                                                "(provider and model are then ignored).")
    grounded = serializers.BooleanField(required=False, default=True)
    allow_model_save = serializers.BooleanField(required=False, default=False)
    include_private_in_ai = serializers.BooleanField(required=False, default=False)
    prompt_tier = serializers.ChoiceField(choices=Thread.PromptTier.choices, required=False, default="auto")
    temporary = StrictBooleanField(
        required=False, default=False,
        help_text="A temporary chat: never listed or searched, not titled by its model, deleted when closed "
                  "or CHAT_TEMPORARY_TTL_S after its last activity. JSON true or false only.")


class ThreadUpdateSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    provider = serializers.SlugRelatedField(slug_field="slug", queryset=Provider.objects.filter(enabled=True), required=False)
    model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    assistant = serializers.UUIDField(required=False, allow_null=True,
                                      help_text="Run under this workspace assistant (on its model); null: none. "
                                                "Changing provider or model without it leaves the assistant.")
    grounded = serializers.BooleanField(required=False)
    allow_model_save = serializers.BooleanField(required=False)
    include_private_in_ai = serializers.BooleanField(required=False)
    prompt_tier = serializers.ChoiceField(choices=Thread.PromptTier.choices, required=False)
    ui_context = serializers.JSONField(required=False)
    pinned = serializers.BooleanField(required=False)
    archived = serializers.BooleanField(required=False)
    title_visible_to_admins = serializers.BooleanField(
        required=False, help_text="Let the workspace's admins see this chat's title in an admin-blind workspace.")
    folder = serializers.CharField(
        required=False, allow_null=True, max_length=64,
        help_text="One of your folders in the chat's workspace (its id), or null: no folder. Any id that is not "
                  "yours: 400 invalid \"No such folder.\"; yours in another workspace: 400 folder_workspace_mismatch.")
    tags = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=1000), required=False,
        max_length=100,
        help_text="The chat's whole list of tags (replaces it; [] removes all): names trimmed, 1–50 characters, no "
                  "comma, case-insensitive duplicates merged, at most 20.")


class FolderSerializer(serializers.ModelSerializer):
    """One of the caller's folders (``chat.organise``)."""

    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    thread_count = serializers.IntegerField(
        read_only=True, default=0, help_text="Its chats the list shows (not archived, never temporary).")

    class Meta:
        model = Folder
        fields = ["id", "workspace", "name", "collapsed", "thread_count", "created_at"]
        read_only_fields = fields


class FolderCreateSerializer(serializers.Serializer):
    name = serializers.CharField(trim_whitespace=False, allow_blank=True, max_length=1000,
                                 help_text="1–100 characters after trimming; unique (any case) in the workspace.")
    workspace = serializers.CharField(required=False, help_text="Workspace slug or id; default: your first.")


class FolderUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True, max_length=1000)
    collapsed = StrictBooleanField(required=False, help_text="The rail shows only the folder's name.")


class TagSerializer(serializers.Serializer):
    name = serializers.CharField()
    thread_count = serializers.IntegerField(help_text="Your listed chats carrying it (not archived).")


def passages_for(messages, thread) -> dict:
    """The cited passages of ``messages`` (one query), for the ``passages`` context."""
    from knowledge.selectors import citation_passages

    chunk_ids = {c.get("chunk_id") for m in messages for c in (m.citations or [])}
    return citation_passages(chunk_ids=chunk_ids, workspace_id=thread.workspace_id, owner_id=thread.owner_id)


def ledger_by_call(messages) -> dict[tuple, ToolCall]:
    """``(message_id, call_id) → ToolCall`` for the assistant messages given (one query)."""
    ids = [m.pk for m in messages if m.role == Message.Role.ASSISTANT and m.tool_calls]
    if not ids:
        return {}
    rows = ToolCall.objects.filter(message_id__in=ids).select_related("decided_by", "run__thread", "run__user")
    return {(tc.message_id, tc.call_id): tc for tc in rows}


# A call with no ledger row (a copied thread, or a call the worker never reached).
NO_LEDGER_ROW = {"status": None, "summary": "", "is_error": False, "risk_level": "", "env_context": "",
                 "requested_at": None, "countdown_s": 0, "arguments_summary": ""}


class AttachmentSerializer(serializers.ModelSerializer):
    """A file attached to a message (``chat.attachments``): what it is and where to fetch it.
    ``url`` downloads the file as uploaded (always ``Content-Disposition: attachment``);
    ``thumbnail_url`` is a small WebP preview of an image (null for documents)."""

    message_id = serializers.UUIDField(read_only=True, allow_null=True)
    url = serializers.SerializerMethodField()
    thumbnail_url = serializers.SerializerMethodField()
    text_chars = serializers.SerializerMethodField(help_text="Characters of text extracted from a document (0 for images).")

    class Meta:
        model = Attachment
        fields = ["id", "message_id", "kind", "filename", "content_type", "size", "width", "height", "text_chars",
                  "url", "thumbnail_url", "created_at"]
        read_only_fields = fields

    def get_url(self, obj) -> str:
        from django.urls import reverse

        return reverse("attachment-content", args=[obj.pk])

    def get_thumbnail_url(self, obj) -> str | None:
        from django.urls import reverse

        return reverse("attachment-thumbnail", args=[obj.pk]) if obj.kind == Attachment.Kind.IMAGE else None

    def get_text_chars(self, obj) -> int:
        chars = getattr(obj, "text_chars", None)  # annotated by the listing (the text itself is deferred)
        if chars is None:
            chars = len(obj.text or "") if "text" in obj.__dict__ else 0
        return int(chars or 0)


class MessageSerializer(serializers.ModelSerializer):
    content_html = serializers.SerializerMethodField()
    attachments = serializers.SerializerMethodField(
        help_text="Files sent with this (user) message, upload order: the attachment shape of "
                  "/api/v1/attachments/{id}/."
    )
    tool_calls = serializers.SerializerMethodField()
    run_id = serializers.UUIDField(source="run.pk", read_only=True, allow_null=True, default=None)
    parent_id = serializers.UUIDField(read_only=True, allow_null=True)
    versions = serializers.SerializerMethodField(
        help_text='{"index": n, "count": k, "ids": [...]}: the versions of this place in the conversation '
                  "(messages with the same parent, oldest first); count 1 when it was never edited or regenerated."
    )

    class Meta:
        model = Message
        fields = [
            "id", "run_id", "parent_id", "versions", "position", "role", "content", "content_html", "tool_calls",
            "tool_call_id", "is_error", "provider", "model", "status", "citations", "usage", "error", "attachments",
            "created_at",
        ]

    citations = serializers.SerializerMethodField(
        help_text='[{"n", "item_id", "chunk_id", "title", "passage"}]: passage is the cited text (≤ 600 chars) '
                  "when it can still be shown."
    )

    error = serializers.SerializerMethodField(
        help_text='{"code", "message"} or {}. Upstream detail only for staff and workspace admins; others '
                  "get a generic message naming the code (agents.presentation.error_for_viewer)."
    )

    @extend_schema_field(AttachmentSerializer(many=True))
    def get_attachments(self, obj) -> list[dict]:
        if obj.role != Message.Role.USER:
            return []
        by_message = self.context.get("attachments")
        if by_message is None:  # one message shown alone: read its own
            from chat.selectors import attachments_for_messages

            by_message = attachments_for_messages([obj.pk])
        return AttachmentSerializer(by_message.get(obj.pk, []), many=True).data

    def get_error(self, obj) -> dict:
        return error_for_viewer(obj.error, detailed=self.context.get("detailed", False))

    def get_citations(self, obj) -> list[dict]:
        passages = self.context.get("passages", {})
        return [{**c, **passages.get(c.get("chunk_id"), {})} for c in obj.citations or []]

    def get_versions(self, obj) -> dict:
        versions = self.context.get("versions", {})
        return versions.get(obj.pk) or {"index": 1, "count": 1, "ids": [str(obj.pk)]}

    def get_content_html(self, obj) -> str:
        return render_markdown(obj.content) if obj.role == Message.Role.ASSISTANT else ""

    def get_tool_calls(self, obj) -> list[dict]:
        ledger = self.context.get("ledger", {})
        extras = self.context.get("_mcp_extras")
        if extras is None:  # once per listing: an MCP server's questions and links (mcp_client)
            from mcp_client.presentation import call_extras

            extras = self.context["_mcp_extras"] = call_extras([row.pk for row in ledger.values()])
        out = []
        for call in obj.tool_calls or []:
            row = ledger.get((obj.pk, call["id"]))
            if row is None and "status" in call:  # a copied chat: the outcome snapshot taken when copying
                shown = {**NO_LEDGER_ROW, "decision": "", "decided_by": "",
                         **{k: call[k] for k in call if k in NO_LEDGER_ROW or k in ("decision", "decided_by")}}
            elif row is not None:
                shown = {**tool_call_presentation(row), "decision": row.decision,
                         "decided_by": row.decided_by.get_username() if row.decided_by else ""}
                if row.status == ToolCall.Status.AWAITING_APPROVAL:  # the card: rule, who, how many, expiry
                    shown["approval"] = approval_fields(row, row.run)
            else:
                shown = {**NO_LEDGER_ROW, "decision": "", "decided_by": ""}
            out.append({"id": call["id"], "name": call["name"], "arguments": call.get("arguments", ""),
                        "tool_call_id": str(row.pk) if row else None, **shown,
                        **(extras.get(str(row.pk), {}) if row else {})})
        return out


class StrictCharField(serializers.CharField):
    """A CharField that takes only JSON strings (DRF's own turns 42 into "42")."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class RunCreateSerializer(serializers.Serializer):
    """A send: ``POST /threads/{id}/runs/`` and the websocket's ``message.send`` frame."""

    content = StrictCharField(trim_whitespace=False, allow_blank=True)
    grounded = serializers.BooleanField(required=False, allow_null=True, default=None)
    include_private = serializers.BooleanField(required=False, allow_null=True, default=None)
    ui_context = serializers.JSONField(required=False, allow_null=True, default=None)
    env_id = StrictCharField(required=False, allow_blank=True, allow_null=True, max_length=100, default="")
    attachments = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, default=list, max_length=100,
        help_text="Ids of your pending attachments of this thread (POST /threads/{id}/attachments/), sent with "
                  "this message; with attachments the content may be empty.",
    )

    def validate_env_id(self, value) -> str:
        return value or ""


def valid_unicode(value: str) -> str:
    """Refuse lone UTF-16 surrogates (valid JSON escapes, not storable text): 400, nothing saved."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise serializers.ValidationError("The text contains a lone UTF-16 surrogate; send valid Unicode.") from exc
    return value


class RunOptionsSerializer(serializers.Serializer):
    """Per-send options of an edit or a regenerate (as in ``RunCreateSerializer``)."""

    grounded = serializers.BooleanField(required=False, allow_null=True, default=None)
    include_private = serializers.BooleanField(required=False, allow_null=True, default=None)
    env_id = StrictCharField(required=False, allow_blank=True, allow_null=True, max_length=100, default="")

    def validate_env_id(self, value) -> str:
        return value or ""


class MessageEditSerializer(RunOptionsSerializer):
    content = StrictCharField(trim_whitespace=False, allow_blank=True, validators=[valid_unicode])


class PreferencesSerializer(serializers.Serializer):
    custom_instructions = serializers.CharField(allow_blank=True, trim_whitespace=False, validators=[valid_unicode],
                                                required=False)
    default_model = serializers.CharField(
        allow_blank=True, max_length=401, required=False,
        help_text='The model your new chats start with, as "provider/model" (or "provider": its default model); '
                  '"": none of your own (the workspace\'s default, else the first configured provider). Must be a '
                  "model you may use (else 400 model_not_allowed).")
    language = serializers.CharField(
        allow_blank=True, max_length=16, required=False,
        help_text='The language of your pages and messages: a code the site offers ("de", "zh-hans"…); "": your '
                  "browser's (else 400 language_not_supported).")


class BranchSelectSerializer(serializers.Serializer):
    message_id = serializers.CharField(help_text="The version to show (any message of the thread).")


class BranchSelectedSerializer(serializers.Serializer):
    leaf_id = serializers.UUIDField()


class RunCreatedSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    user_message_id = serializers.UUIDField()


class RunSerializer(serializers.ModelSerializer):
    thread_id = serializers.UUIDField(source="thread.pk", read_only=True)
    provider = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    error = serializers.SerializerMethodField(
        help_text='{"code", "message", …} or {}; upstream detail only for staff and workspace admins.'
    )

    def get_error(self, obj) -> dict:
        return error_for_viewer(obj.error, detailed=self.context.get("detailed", False))

    class Meta:
        model = Run
        fields = [
            "id", "thread_id", "status", "provider", "model", "iterations", "error", "last_event_seq",
            "created_at", "started_at", "finished_at",
        ]
