"""Writing prompts: create, update (including moving between personal and a workspace) and
delete. Every write checks permission now (``selectors.prompt_can_edit`` /
``prompt_can_share``), not only when the page was drawn.

Refusals are :class:`PromptRejected` (a ``ServiceError``) with ``field`` naming the input at
fault, so the API answers 400 ``invalid`` with ``"<field>: <message>"`` and the page shows the
message under that field.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from chat.models import Workspace
from chatplatform.errors import ServiceError
from chatplatform.safe_input import hidden_control

from .models import Prompt
from .selectors import prompt_can_edit, prompt_can_share
from .variables import prompt_variables

COMMAND_MAX = 40
TITLE_MAX = 120
BODY_MAX = 8000          # characters: a prompt is a message's start, and a message allows more
VARIABLES_MAX = 20
PERSONAL_MAX = 200       # personal prompts per user
WORKSPACE_MAX = 500      # shared prompts per workspace
COMMAND = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class PromptRejected(ServiceError):
    """A prompt the service refuses; ``field``: the input at fault (``command``, ``title``,
    ``body``, ``workspace``) or None."""

    def __init__(self, message: str, *, field: str | None = None, code: str = "invalid", status: int = 400):
        super().__init__(code, message, status, field=field)
        self.field = field


def _clean(*, command: str, title: str, body: str) -> tuple[str, str, str]:
    command = (command or "").strip().lstrip("/").strip().lower()
    if not command:
        raise PromptRejected(_("Give the prompt a command, e.g. summarize (typed as /summarize)."), field="command")
    if len(command) > COMMAND_MAX:
        raise PromptRejected(_("A command is at most %(n)d characters.") % {"n": COMMAND_MAX}, field="command")
    if not COMMAND.match(command):
        raise PromptRejected(_("A command is lowercase letters, digits, - and _, starting with a letter or digit."),
                             field="command")
    title = (title or "").strip()
    if not title:
        raise PromptRejected(_("Give the prompt a title."), field="title")
    if len(title) > TITLE_MAX:
        raise PromptRejected(_("A title is at most %(n)d characters.") % {"n": TITLE_MAX}, field="title")
    char = hidden_control(title)  # a bidirectional override would disguise the title in the picker
    if char:
        raise PromptRejected(_("Remove the invisible control character %(char)s.") % {"char": char}, field="title")
    body = (body or "").replace("\r\n", "\n")
    if not body.strip():
        raise PromptRejected(_("Write the prompt's text."), field="body")
    if len(body) > BODY_MAX:
        raise PromptRejected(_("A prompt is at most %(max)d characters; this one has %(n)d.")
                             % {"max": BODY_MAX, "n": len(body)}, field="body")
    count = len(prompt_variables(body))
    if count > VARIABLES_MAX:
        raise PromptRejected(ngettext("A prompt has at most %(max)d variable; this one has %(n)d.",
                                      "A prompt has at most %(max)d variables; this one has %(n)d.", VARIABLES_MAX)
                             % {"max": VARIABLES_MAX, "n": count}, field="body")
    return command, title, body


def _check_scope(*, user, workspace: Workspace | None, exclude=None) -> None:
    """May ``user`` keep one more prompt in this scope? (permission and the count limits)"""
    if workspace is not None:
        if not prompt_can_share(user=user, workspace=workspace):
            raise PromptRejected(_("Your role in %(workspace)s cannot share prompts; keep it personal.")
                                 % {"workspace": workspace.name}, field="workspace", code="not_allowed", status=403)
        rows, limit = Prompt.objects.filter(workspace=workspace), WORKSPACE_MAX
    else:
        rows, limit = Prompt.objects.filter(owner=user, workspace__isnull=True), PERSONAL_MAX
    if exclude is not None:
        rows = rows.exclude(pk=exclude.pk)
    if rows.count() >= limit:
        raise PromptRejected(_("This library holds %(n)d prompts, the most allowed; delete one first.") % {"n": limit},
                             code="too_many_prompts")


def _duplicate(command: str, workspace: Workspace | None) -> PromptRejected:
    where = (_("in %(workspace)s") % {"workspace": workspace.name}) if workspace else _("among your personal prompts")
    return PromptRejected(_("/%(command)s already exists %(where)s; pick another command.")
                          % {"command": command, "where": where}, field="command")


def _command_taken(*, owner, command: str, workspace: Workspace | None, exclude=None) -> bool:
    rows = (Prompt.objects.filter(workspace=workspace) if workspace is not None
            else Prompt.objects.filter(owner=owner, workspace__isnull=True))
    if exclude is not None:
        rows = rows.exclude(pk=exclude.pk)
    return rows.filter(command=command).exists()


def _save(prompt: Prompt, *, user) -> Prompt:
    try:
        with transaction.atomic():
            # One write at a time per author, so two saves at once cannot pass the limits together.
            get_user_model().objects.select_for_update().filter(pk=user.pk).first()
            _check_scope(user=user, workspace=prompt.workspace, exclude=prompt if not prompt._state.adding else None)
            if _command_taken(owner=prompt.owner, command=prompt.command, workspace=prompt.workspace,
                              exclude=None if prompt._state.adding else prompt):
                raise _duplicate(prompt.command, prompt.workspace)
            prompt.save()
    except IntegrityError as exc:  # the same command saved at the same moment by someone else
        raise _duplicate(prompt.command, prompt.workspace) from exc
    return prompt


def prompt_create(*, user, command: str, title: str, body: str, workspace: Workspace | None = None) -> Prompt:
    """A new prompt of ``user``: personal (``workspace`` None) or shared with ``workspace``
    (which the caller resolved with ``chat.selectors.workspace_get_for_user``). Refusals
    (:class:`PromptRejected`): 400 ``invalid`` with ``field`` (command empty, too long or not
    ``[a-z0-9][a-z0-9_-]*``, duplicate in the scope; title empty or over 120; body empty,
    over ``BODY_MAX`` characters or over ``VARIABLES_MAX`` variables), 403 ``not_allowed``
    (a viewer sharing), 400 ``too_many_prompts``."""
    command, title, body = _clean(command=command, title=title, body=body)
    return _save(Prompt(owner=user, workspace=workspace, command=command, title=title, body=body), user=user)


_UNSET = object()


def prompt_update(*, prompt: Prompt, by, command: str | None = None, title: str | None = None,
                  body: str | None = None, workspace=_UNSET) -> Prompt:
    """Change the given fields of ``prompt`` (from ``prompt_get_for_user``). ``workspace``: a
    Workspace to share it with, None to make it personal again — only its author may (an
    admin cannot turn someone's shared prompt into their own personal one). 403
    ``not_allowed`` unless ``by`` may edit it now; otherwise the refusals of
    :func:`prompt_create`."""
    if not prompt_can_edit(user=by, prompt=prompt):
        raise PromptRejected(_("You may use this prompt but not change it: its author and the workspace's "
                               "admins can."), code="not_allowed", status=403)
    command, title, body = _clean(command=prompt.command if command is None else command,
                                  title=prompt.title if title is None else title,
                                  body=prompt.body if body is None else body)
    if workspace is not _UNSET and workspace != prompt.workspace:
        if workspace is None and prompt.owner_id != by.pk:
            raise PromptRejected(_("Only the prompt's author can make it personal."), field="workspace",
                                 code="not_allowed", status=403)
        if workspace is not None and prompt.owner_id != by.pk and not prompt_can_share(user=prompt.owner,
                                                                                       workspace=workspace):
            raise PromptRejected(_("The prompt's author cannot share with %(workspace)s.")
                                 % {"workspace": workspace.name}, field="workspace", code="not_allowed", status=403)
        prompt.workspace = workspace
    prompt.command, prompt.title, prompt.body = command, title, body
    try:
        return _save(prompt, user=by if prompt.workspace is not None else prompt.owner)
    except PromptRejected:
        prompt.refresh_from_db()
        raise


def prompt_delete(*, prompt: Prompt, by) -> None:
    """Delete ``prompt`` (from ``prompt_get_for_user``); 403 ``not_allowed`` unless ``by`` may
    edit it now."""
    if not prompt_can_edit(user=by, prompt=prompt):
        raise PromptRejected(_("You may use this prompt but not delete it: its author and the workspace's "
                               "admins can."), code="not_allowed", status=403)
    prompt.delete()
