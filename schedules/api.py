"""``/api/v1/schedules/``: the caller's scheduled runs (DESIGN §6).

A schedule belongs to its creator (always the caller: no owner field is read) and sends its
prompt into one of the caller's own threads; another user's schedule or thread is a 404.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api.serializers import valid_unicode

from .models import Schedule, ScheduleFire
from .selectors import schedule_get_for_user, schedule_history, schedules_for_user
from .services import (
    NAME_MAX,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_update,
)


class ScheduleFireSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    due_at = serializers.DateTimeField(read_only=True, help_text="When the schedule was due.")
    fired_at = serializers.DateTimeField(read_only=True, help_text="When a ticker claimed the fire.")
    status = serializers.ChoiceField(choices=ScheduleFire.Status.choices, read_only=True)
    detail = serializers.CharField(read_only=True, help_text="Why skipped or not started.")
    run_id = serializers.UUIDField(read_only=True, allow_null=True)
    run_status = serializers.SerializerMethodField(help_text="The run's status now (queued, running, "
                                                             "awaiting_approval, completed, failed, cancelled, interrupted).")

    def get_run_status(self, obj) -> str | None:
        return obj.run.status if obj.run_id and obj.run else None


class ScheduleSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    name = serializers.CharField(read_only=True)
    thread = serializers.UUIDField(source="thread_id", read_only=True)
    thread_title = serializers.CharField(source="thread.title", read_only=True)
    workspace = serializers.CharField(source="workspace.slug", read_only=True)
    prompt = serializers.CharField(read_only=True)
    kind = serializers.ChoiceField(choices=Schedule.Kind.choices, read_only=True)
    cron = serializers.CharField(read_only=True)
    interval_s = serializers.IntegerField(read_only=True, allow_null=True)
    env_id = serializers.CharField(read_only=True)
    overlap = serializers.ChoiceField(choices=Schedule.Overlap.choices, read_only=True)
    paused = serializers.BooleanField(read_only=True)
    paused_reason = serializers.CharField(read_only=True)
    next_fire_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_fired_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)


class ScheduleDetailSerializer(ScheduleSerializer):
    history = serializers.SerializerMethodField()

    def get_history(self, obj) -> list[dict]:
        return ScheduleFireSerializer(schedule_history(schedule=obj), many=True).data


class ScheduleWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX, validators=[valid_unicode], error_messages={
        "blank": _("Give the schedule a name."), "required": _("Give the schedule a name."),
        "max_length": _("A schedule's name is at most %(n)d characters.") % {"n": NAME_MAX}})
    thread = serializers.CharField(max_length=64, help_text="One of your threads (its id).", error_messages={
        "required": _("Choose the chat the schedule writes in."), "blank": _("Choose the chat the schedule writes in.")})
    prompt = serializers.CharField(trim_whitespace=False, validators=[valid_unicode], error_messages={
        "blank": _("Write the prompt the schedule sends."), "required": _("Write the prompt the schedule sends.")})
    kind = serializers.ChoiceField(choices=Schedule.Kind.choices, default=Schedule.Kind.CRON)
    cron = serializers.CharField(max_length=100, required=False, allow_blank=True, default="",
                                 help_text='Five fields, UTC (e.g. "0 9 * * 1-5").')
    interval_s = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                          max_value=366 * 86400, help_text="Seconds between fires.")
    env_id = serializers.CharField(max_length=100, required=False, allow_blank=True, default="",
                                   help_text="An environment's name (as a send's env_id); empty: none.")
    overlap = serializers.ChoiceField(choices=Schedule.Overlap.choices, default=Schedule.Overlap.SKIP)
    paused = serializers.BooleanField(required=False, default=False)


class ScheduleUpdateSerializer(ScheduleWriteSerializer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, partial=True, **kwargs)


class ScheduleListCreateApi(APIView):
    """GET: the caller's schedules. POST: a new one (**201**); 400 with the field's message
    for a bad timing (``invalid_cron``, ``too_frequent``), prompt, environment; 404 for a
    thread that is not the caller's."""

    @extend_schema(responses=ScheduleSerializer(many=True), operation_id="schedules_list")
    def get(self, request):
        return Response(ScheduleSerializer(schedules_for_user(user=request.user), many=True).data)

    @extend_schema(request=ScheduleWriteSerializer, responses={201: ScheduleDetailSerializer},
                   operation_id="schedules_create")
    def post(self, request):
        data = ScheduleWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        schedule = schedule_create(user=request.user, thread_id=values.pop("thread"), **values)
        return Response(ScheduleDetailSerializer(schedule).data, status=status.HTTP_201_CREATED)


class ScheduleDetailApi(APIView):
    """GET: one schedule with its latest 50 fires (``history``). PATCH: change name, prompt,
    timing, environment or overlap. DELETE: **204** (the runs it started stay)."""

    @extend_schema(responses=ScheduleDetailSerializer, operation_id="schedules_retrieve")
    def get(self, request, schedule_id):
        return Response(ScheduleDetailSerializer(schedule_get_for_user(user=request.user,
                                                                       schedule_id=schedule_id)).data)

    @extend_schema(request=ScheduleUpdateSerializer, responses=ScheduleDetailSerializer,
                   operation_id="schedules_update")
    def patch(self, request, schedule_id):
        schedule = schedule_get_for_user(user=request.user, schedule_id=schedule_id)
        data = ScheduleUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        changes = {k: v for k, v in data.validated_data.items() if k in request.data and k not in ("thread", "paused")}
        return Response(ScheduleDetailSerializer(schedule_update(schedule=schedule, **changes)).data)

    @extend_schema(responses={204: None}, operation_id="schedules_delete")
    def delete(self, request, schedule_id):
        schedule_delete(schedule=schedule_get_for_user(user=request.user, schedule_id=schedule_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SchedulePauseApi(APIView):
    """POST: pause (no more fires; a fire waiting to start is dropped)."""

    @extend_schema(request=None, responses=ScheduleDetailSerializer, operation_id="schedules_pause")
    def post(self, request, schedule_id):
        schedule = schedule_get_for_user(user=request.user, schedule_id=schedule_id)
        return Response(ScheduleDetailSerializer(schedule_pause(schedule=schedule)).data)


class ScheduleResumeApi(APIView):
    """POST: resume; the next fire is the first after now (nothing missed is caught up)."""

    @extend_schema(request=None, responses=ScheduleDetailSerializer, operation_id="schedules_resume")
    def post(self, request, schedule_id):
        schedule = schedule_get_for_user(user=request.user, schedule_id=schedule_id)
        return Response(ScheduleDetailSerializer(schedule_resume(schedule=schedule)).data)
