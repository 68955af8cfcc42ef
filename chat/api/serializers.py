"""Serializers for threads, messages and runs. Shapes only; logic lives in services."""

from __future__ import annotations

from rest_framework import serializers

from agents.models import Provider, Run, ToolCall
from agents.presentation import tool_call_presentation
from chat.models import Message, Thread, Workspace
from chat.rendering import render_markdown


class WorkspaceSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = ["id", "slug", "name", "role"]

    def get_role(self, obj) -> str | None:
        roles = self.context.get("roles", {})
        return roles.get(obj.pk)


class ThreadSerializer(serializers.ModelSerializer):
    workspace = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    provider = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Thread
        fields = [
            "id", "workspace", "title", "provider", "model", "grounded", "allow_model_save",
            "include_private_in_ai", "ui_context", "prompt_tier", "created_at", "updated_at",
        ]
        read_only_fields = fields


class ThreadCreateSerializer(serializers.Serializer):
    workspace = serializers.CharField(help_text="Workspace slug or id.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    provider = serializers.SlugRelatedField(
        slug_field="slug", queryset=Provider.objects.filter(enabled=True), required=False, allow_null=True
    )
    model = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    grounded = serializers.BooleanField(required=False, default=True)
    allow_model_save = serializers.BooleanField(required=False, default=False)
    include_private_in_ai = serializers.BooleanField(required=False, default=False)


class ThreadUpdateSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    provider = serializers.SlugRelatedField(slug_field="slug", queryset=Provider.objects.filter(enabled=True), required=False)
    model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    grounded = serializers.BooleanField(required=False)
    allow_model_save = serializers.BooleanField(required=False)
    include_private_in_ai = serializers.BooleanField(required=False)
    prompt_tier = serializers.ChoiceField(choices=Thread.PromptTier.choices, required=False)
    ui_context = serializers.JSONField(required=False)


def ledger_by_call(messages) -> dict[tuple, ToolCall]:
    """``(message_id, call_id) → ToolCall`` for the assistant messages given (one query)."""
    ids = [m.pk for m in messages if m.role == Message.Role.ASSISTANT and m.tool_calls]
    if not ids:
        return {}
    return {(tc.message_id, tc.call_id): tc for tc in ToolCall.objects.filter(message_id__in=ids)}


# A call with no ledger row (a copied thread, or a call the worker never reached).
NO_LEDGER_ROW = {"status": None, "summary": "", "is_error": False, "risk_level": "", "env_context": "",
                 "requested_at": None, "countdown_s": 0, "arguments_summary": ""}


class MessageSerializer(serializers.ModelSerializer):
    content_html = serializers.SerializerMethodField()
    tool_calls = serializers.SerializerMethodField()
    run_id = serializers.UUIDField(source="run.pk", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Message
        fields = [
            "id", "run_id", "position", "role", "content", "content_html", "tool_calls", "tool_call_id",
            "is_error", "provider", "model", "status", "citations", "usage", "error", "created_at",
        ]

    def get_content_html(self, obj) -> str:
        return render_markdown(obj.content) if obj.role == Message.Role.ASSISTANT else ""

    def get_tool_calls(self, obj) -> list[dict]:
        ledger = self.context.get("ledger", {})
        out = []
        for call in obj.tool_calls or []:
            row = ledger.get((obj.pk, call["id"]))
            shown = tool_call_presentation(row) if row else NO_LEDGER_ROW
            out.append({"id": call["id"], "name": call["name"], "arguments": call.get("arguments", ""),
                        "tool_call_id": str(row.pk) if row else None, **shown})
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

    def validate_env_id(self, value) -> str:
        return value or ""


class RunCreatedSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    user_message_id = serializers.UUIDField()


class RunSerializer(serializers.ModelSerializer):
    thread_id = serializers.UUIDField(source="thread.pk", read_only=True)
    provider = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Run
        fields = [
            "id", "thread_id", "status", "provider", "model", "iterations", "error", "last_event_seq",
            "created_at", "started_at", "finished_at",
        ]
