"""The presets plug-in point: a named preset a thread runs under (a workspace assistant of the
``assistants`` app, registered in its ``AppConfig.ready``), so ``agents`` never imports that app.

A preset adds to a run, at run time and for the run's *caller*:

* ``instructions`` — a fenced, labelled block of the system prompt;
* ``tools`` — the names the preset allows (``None``: no narrowing); the offer and the
  invocation guard keep only these, after the caller's own role decided (``agents.pipeline``);
* ``knowledge`` — the retrieval scope ``{"tags": [...], "items": [...]}`` (``None``: the
  whole workspace) the grounding provider and the ``search_knowledge`` tool narrow to.

A preset that may not be used now (disabled, no longer visible to the caller) is refused with
:class:`PresetRefused` — a send answers it (403), a run already queued fails with its message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chatplatform.errors import ServiceError


class PresetRefused(ServiceError):
    """The thread's preset may not be used now (``code``: ``assistant_disabled``,
    ``assistant_not_found``); ``message`` says why and what to do."""


@dataclass(frozen=True)
class Preset:
    """What a thread's preset adds to a run (see the module docstring)."""

    id: str
    name: str
    instructions: str = ""
    tools: frozenset[str] | None = None
    knowledge: dict | None = None


@dataclass(frozen=True)
class Pick:
    """A preset chosen for a thread: the model it runs on and the workspace it belongs to."""

    preset_id: str
    provider: object  # an agents.models.Provider, or None (the thread then has no provider)
    model: str
    workspace_id: int


class PresetSource(Protocol):
    def pick(self, *, user, preset_id: str, workspace_id: int | None = None) -> Pick:
        """Choose preset ``preset_id`` for a thread of ``user`` (in ``workspace_id`` when
        given). Raises ``Http404`` for one the user may not see (another workspace's,
        another user's private one, unknown), ``ServiceError`` (``assistant_disabled`` 409,
        ``model_not_allowed`` 403) for one they may not use now."""

    def for_thread(self, *, thread, user) -> Preset | None:
        """The preset of ``thread`` for a run of ``user`` now, or None; ``PresetRefused``."""

    def choices(self, *, user, workspace_id: int | None) -> list[dict]:
        """The presets ``user`` may pick in ``workspace_id`` (the model picker's list)."""

    def model_ids(self, *, user) -> list[dict]:
        """The ``/v1/models`` entries of the presets ``user`` may use."""


_source: PresetSource | None = None


def register_presets(source: PresetSource) -> None:
    """Install the process's preset source (the last registration wins)."""
    global _source
    _source = source


def preset_source() -> PresetSource | None:
    return _source


def preset_for_thread(*, thread, user) -> Preset | None:
    """The preset ``thread`` runs under for ``user`` now (None: none, or no source is
    installed). Raises :class:`PresetRefused`."""
    if _source is None or getattr(thread, "assistant_id", None) is None:
        return None
    return _source.for_thread(thread=thread, user=user)


def preset_pick(*, user, preset_id: str, workspace_id: int | None = None) -> Pick:
    """See :meth:`PresetSource.pick`; ``Http404`` when no source is installed."""
    if _source is None:
        from django.http import Http404

        raise Http404("No such assistant.")
    return _source.pick(user=user, preset_id=preset_id, workspace_id=workspace_id)


def preset_choices(*, user, workspace_id: int | None) -> list[dict]:
    return _source.choices(user=user, workspace_id=workspace_id) if _source is not None else []


def preset_model_ids(*, user) -> list[dict]:
    return _source.model_ids(user=user) if _source is not None else []


def preset_block(preset: Preset | None) -> str:
    """The system-prompt block of ``preset``'s instructions ("" when none): fenced and labelled,
    like the workspace's and the user's instructions (``chat.selectors.instruction_blocks``)."""
    if preset is None or not preset.instructions.strip():
        return ""
    return (f'Instructions of the assistant "{preset.name}" that the user chose for this chat:\n'
            f"<<<assistant instructions\n{preset.instructions.strip()}\n>>>end of assistant instructions")


def preset_knowledge_scope(*, thread, user) -> dict | None:
    """The retrieval scope of ``thread``'s preset for ``user`` (``{"tags", "items"}``), None
    for the whole workspace; a preset that may not be used now scopes to nothing."""
    try:
        preset = preset_for_thread(thread=thread, user=user)
    except PresetRefused:
        return {"tags": [], "items": []}
    return preset.knowledge if preset is not None else None


def preset_tools_for_call(*, thread_id, user_id) -> frozenset[str] | None:
    """The tool names the preset of thread ``thread_id`` allows ``user_id`` now, for code that
    has only a tool call's scope (``ToolContext``); None: no preset (or not a thread id); a
    preset that may not be used now allows none."""
    from django.core.exceptions import ValidationError

    from chat.models import Thread

    try:
        thread = Thread.objects.filter(pk=thread_id).only("id", "assistant_id", "workspace_id").first()
    except (ValidationError, ValueError):
        return None
    if thread is None or thread.assistant_id is None:
        return None
    try:
        preset = preset_for_thread(thread=thread, user=user_id)
    except PresetRefused:
        return frozenset()
    return preset.tools if preset is not None else None
