"""Folders and tags: each person's own organisation of their own chats (issue 55).

A chat (``Thread``) is in at most one :class:`~chat.models.Folder` of its owner and of its own
workspace, and carries any number of the owner's :class:`~chat.models.Tag`s. Nobody else sees
either: a folder id that is not the caller's own (another user's, a workspace they left, a
malformed id) is answered exactly like an unknown one (``Http404`` "No such folder." / 400 on a
thread), and a workspace admin reading a member's chat does not see its folder or tags.

Names are plain text, compared as :func:`name_key` gives them (NFKC, case-folded) so "Work",
"WORK" and "ｗｏｒｋ" are one folder or tag whatever the database's ``lower()`` does; the first
spelling is kept. Reads (``folder_*_for_user``, ``tag_list_for_user``) and writes live here
together: this module is part of the conversation core (the ``chat-core`` import contract).
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from dataclasses import dataclass
from types import EllipsisType

from django.db import IntegrityError, transaction
from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils.translation import gettext as _

from chatplatform.errors import ServiceError
from chatplatform.safe_input import hidden_control

from .models import Folder, Tag, Thread, Workspace

FOLDER_NAME_MAX_CHARS = 100
FOLDERS_MAX_PER_WORKSPACE = 100  # per person and workspace: a rail of more is not organised any more
TAG_NAME_MAX_CHARS = 50
TAGS_MAX_PER_THREAD = 20

# Besides the control and bidirectional characters every shown name refuses
# (chatplatform.safe_input.hidden_control: a name that reverses the text after it in the
# rail), lone UTF-16 surrogates: valid JSON escapes, not storable text. Other format
# characters (emoji joiners) are fine.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A key (name_key) may be this many times the name's length: NFKC expands a few characters
# (U+FDFA is 18), case folding a few more (ß → ss); the key column holds 4×.
_KEY_GROWTH = 4


def name_key(name: str) -> str:
    """The form two names are compared in: NFKC, case-folded (``"Straße"`` → ``"strasse"``)."""
    return unicodedata.normalize("NFKC", name).casefold()


def tag_key(raw: str) -> str:
    """The key of the tag ``raw`` names as a person types it (``" #Work "`` → ``"work"``)."""
    return name_key(" ".join(raw.lstrip().removeprefix("#").split()))


def _clean_name(raw, *, max_chars: int, field: str) -> str:
    """``raw`` trimmed, inner runs of whitespace as one space. ServiceError 400 ``invalid``
    (the message names ``field``) for a non-string, an empty name, one over ``max_chars``
    characters or one with control characters."""
    if not isinstance(raw, str):
        raise ServiceError("invalid", _("%(field)s: must be text.") % {"field": field})
    name = " ".join(raw.split())
    if not name:
        raise ServiceError("invalid", _("%(field)s: may not be empty.") % {"field": field})
    if len(name) > max_chars:
        raise ServiceError("invalid", _("%(field)s: at most %(max)d characters (%(n)d given).")
                           % {"field": field, "max": max_chars, "n": len(name)})
    if hidden_control(name) or _LONE_SURROGATE.search(name):
        raise ServiceError("invalid", _("%(field)s: control characters are not allowed.") % {"field": field})
    if len(name_key(name)) > _KEY_GROWTH * max_chars:
        raise ServiceError("invalid", _("%(field)s: too long once its characters are normalised.") % {"field": field})
    return name


def folder_name_clean(raw) -> str:
    """A folder name as stored: trimmed, 1–100 characters (ServiceError 400 ``invalid``)."""
    return _clean_name(raw, max_chars=FOLDER_NAME_MAX_CHARS, field=_("name"))


def tag_names_clean(raw) -> list[str]:
    """The tags of one chat as stored: each trimmed (a leading ``#`` dropped), 1–50
    characters, no comma; names equal after :func:`name_key` merged (the first spelling
    kept), given order kept; at most 20. ServiceError 400 ``invalid`` otherwise."""
    if not isinstance(raw, list):
        raise ServiceError("invalid", _("tags: must be a list of names."))
    names: list[str] = []
    seen: set[str] = set()
    for item in raw:
        name = _clean_name(item.lstrip().removeprefix("#") if isinstance(item, str) else item,
                           max_chars=TAG_NAME_MAX_CHARS, field=_("tags"))
        if "," in name:
            raise ServiceError("invalid", _("tags: a tag name cannot contain a comma (%(name)s).") % {"name": name})
        if name_key(name) not in seen:
            seen.add(name_key(name))
            names.append(name)
    if len(names) > TAGS_MAX_PER_THREAD:
        raise ServiceError("invalid", _("tags: at most %(max)d tags on a chat (%(n)d given).")
                           % {"max": TAGS_MAX_PER_THREAD, "n": len(names)})
    return names


# --- reads ------------------------------------------------------------------------------------
def _listed_threads() -> Q:
    """The chats a folder's or tag's count counts: those the chat list shows by default."""
    return Q(threads__temporary=False, threads__archived=False)


def folder_list_for_user(*, user, workspace_id=None) -> QuerySet[Folder]:
    """``user``'s folders in the workspaces they belong to (``workspace_id``: that one only),
    by name, each annotated with ``thread_count`` (its chats the list shows: not archived,
    never temporary)."""
    rows = Folder.objects.filter(owner=user, workspace__memberships__user=user).select_related("workspace")
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    return rows.annotate(thread_count=Count("threads", filter=_listed_threads(), distinct=True)).order_by(
        "key", "created_at")


def folder_get_for_user(*, user, folder_id) -> Folder:
    """``user``'s own folder ``folder_id`` in a workspace they still belong to (with
    ``thread_count``). Http404 "No such folder." for anything else — another user's folder,
    a folder of a workspace they left, an unknown or malformed id alike."""
    try:
        folder_id = uuid.UUID(str(folder_id))
        return folder_list_for_user(user=user).get(pk=folder_id)
    except (ValueError, Folder.DoesNotExist) as exc:
        raise Http404(_("No such folder.")) from exc


def tag_list_for_user(*, user) -> QuerySet[Tag]:
    """``user``'s tags that one of their listed chats (not archived, never temporary, in a
    workspace they belong to) carries, by name, each with ``thread_count``."""
    listed = _listed_threads() & Q(threads__workspace__memberships__user=user)
    return (Tag.objects.filter(owner=user).annotate(thread_count=Count("threads", filter=listed, distinct=True))
            .filter(thread_count__gt=0).order_by("key"))


# --- writes -----------------------------------------------------------------------------------
def _name_taken() -> ServiceError:
    return ServiceError("duplicate_name", _("You already have a folder with this name in this workspace."))


def folder_create(*, user, workspace: Workspace, name) -> Folder:
    """A new folder of ``user`` in ``workspace`` (one they belong to: the caller fetched it
    with ``workspace_get_for_user``). ServiceError 400 ``invalid`` (name), 400
    ``duplicate_name`` (they have one of that name there, any case), 400 ``too_many_folders``
    (they have ``FOLDERS_MAX_PER_WORKSPACE`` there)."""
    name = folder_name_clean(name)
    if Folder.objects.filter(owner=user, workspace=workspace).count() >= FOLDERS_MAX_PER_WORKSPACE:
        raise ServiceError("too_many_folders", _("You have %(max)d folders in this workspace: delete one first.")
                           % {"max": FOLDERS_MAX_PER_WORKSPACE})
    try:
        with transaction.atomic():
            return Folder.objects.create(owner=user, workspace=workspace, name=name, key=name_key(name))
    except IntegrityError as exc:
        raise _name_taken() from exc


def folder_update(*, folder: Folder, name=None, collapsed: bool | None = None) -> Folder:
    """Rename ``folder`` and/or fold it in the rail (``folder_get_for_user``'s row). Errors as
    :func:`folder_create`'s for the name; nothing is saved on an error."""
    fields = []
    if name is not None:
        folder.name = folder_name_clean(name)
        folder.key = name_key(folder.name)
        fields += ["name", "key"]
    if collapsed is not None:
        folder.collapsed = collapsed
        fields.append("collapsed")
    if fields:
        try:
            with transaction.atomic():
                folder.save(update_fields=fields)
        except IntegrityError as exc:
            raise _name_taken() from exc
    return folder


def folder_delete(*, folder: Folder) -> int:
    """Delete ``folder``; its chats stay, back in the list (no folder). Returns how many
    chats it held."""
    with transaction.atomic():
        # Lock first: a chat being moved into it meanwhile (thread_organise holds this lock)
        # is then either in it before the chats are taken out, or sees it gone.
        Folder.objects.select_for_update().filter(pk=folder.pk).values_list("pk", flat=True).first()
        moved = Thread.objects.filter(folder=folder).update(folder=None)
        folder.delete()
    return moved


def _refuse_temporary(thread: Thread) -> None:
    if thread.temporary:
        raise ServiceError("temporary_chat", _("A temporary chat is not kept: it cannot be put in a folder or tagged."))


def thread_folder_resolve(*, thread: Thread, user, folder_id) -> Folder | None:
    """The folder ``folder_id`` names for ``thread`` (None: no folder), checked now: the
    caller's own folder in the thread's workspace. ServiceError 400 ``invalid`` "folder: No
    such folder." for any id that is not the caller's own folder (never saying whether it
    exists), 400 ``folder_workspace_mismatch`` for their folder of another workspace, 400
    ``temporary_chat`` for a temporary chat."""
    _refuse_temporary(thread)
    if folder_id is None:
        return None
    try:
        folder = folder_get_for_user(user=user, folder_id=folder_id)
    except Http404 as exc:
        raise ServiceError("invalid", _("folder: No such folder.")) from exc
    if folder.workspace_id != thread.workspace_id:
        raise ServiceError("folder_workspace_mismatch",
                           _("folder: this folder is in another workspace than the chat."))
    return folder


@dataclass(frozen=True)
class Organising:
    """A checked change of a chat's folder and/or tags (:func:`thread_organise_check`);
    ``...`` for a part left unchanged."""

    folder: Folder | None | EllipsisType = ...
    tags: list[str] | EllipsisType = ...


def thread_organise_check(*, thread: Thread, user, folder=..., tags=...) -> Organising:
    """Check a change of ``thread``'s folder and/or tags before anything is written (a PATCH
    that also changes settings saves all or nothing). ``folder``: a folder id or None (no
    folder); ``tags``: the chat's whole list of names (``[]``: none). Errors: those of
    :func:`thread_folder_resolve` and :func:`tag_names_clean`."""
    if folder is not ... or tags is not ...:
        _refuse_temporary(thread)
    return Organising(
        folder=thread_folder_resolve(thread=thread, user=user, folder_id=folder) if folder is not ... else ...,
        tags=tag_names_clean(tags) if tags is not ... else ...)


@transaction.atomic
def thread_organise(*, thread: Thread, user, change: Organising) -> Thread:
    """Apply a checked change to ``thread`` (the caller's own:
    ``thread_get_for_user(..., write=True)``). New tag names become the caller's tags, known
    ones (any case) are reused; a tag no chat carries any more is deleted. Organising is not
    activity: ``updated_at`` (the list's order, a temporary chat's clock) is not touched.
    ServiceError 400 ``invalid`` "folder: No such folder." when the folder was deleted since
    the check (call it in the transaction of the request's other writes: nothing is saved)."""
    if change.folder is not ...:
        # Checked before the write began; deleted since (another tab), the chat would point at
        # no folder when this commits. Read it again under a lock that folder_delete waits for.
        if change.folder is not None and not Folder.objects.select_for_update().filter(
                pk=change.folder.pk).values_list("pk", flat=True).first():
            raise ServiceError("invalid", _("folder: No such folder."))
        Thread.objects.filter(pk=thread.pk).update(folder=change.folder)
        thread.folder = change.folder
    if change.tags is not ...:
        tags = _tags_named(user=user, names=change.tags)
        # A tag found above may have been deleted since as unused (another tab untagged its
        # last chat): lock the ones found; any gone is made again.
        alive = Tag.objects.select_for_update().filter(pk__in=[t.pk for t in tags]).values_list("pk", flat=True)
        if len(set(alive)) != len(tags):
            tags = _tags_named(user=user, names=change.tags)
        thread.tags.set(tags)
        _unused_tags_delete(user=user)
        getattr(thread, "_prefetched_objects_cache", {}).pop("tags", None)
    return thread


def _unused_tags_delete(*, user) -> None:
    """Delete ``user``'s tags that no chat carries. Each is locked, then checked again: another
    request may have just given it a chat (it holds the lock while it does)."""
    unused = list(Tag.objects.filter(owner=user, threads__isnull=True).values_list("pk", flat=True))
    if unused:
        list(Tag.objects.select_for_update().filter(pk__in=unused).values_list("pk", flat=True))
        Tag.objects.filter(pk__in=unused, threads__isnull=True).delete()


def _tags_named(*, user, names: list[str]) -> list[Tag]:
    """The caller's tags of these names, made where missing (a name taken meanwhile by a
    concurrent request is read back)."""
    keys = {name_key(n): n for n in names}
    found = {t.key: t for t in Tag.objects.filter(owner=user, key__in=list(keys))}
    for key, name in keys.items():
        if key not in found:
            try:
                with transaction.atomic():
                    found[key] = Tag.objects.create(owner=user, name=name, key=key)
            except IntegrityError:
                found[key] = Tag.objects.get(owner=user, key=key)
    return [found[key] for key in keys]


def thread_tag_names(thread: Thread) -> list[str]:
    """``thread``'s tag names, sorted as compared (prefetched ``tags`` are used)."""
    return [t.name for t in sorted(thread.tags.all(), key=lambda t: t.key)]
