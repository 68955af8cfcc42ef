"""Reads for the agents app, scoped to the caller."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils.translation import gettext

from chat.selectors import memberships_for_user, thread_get_for_user
from chatplatform.config_cache import config_cached
from llm.capabilities import takes_images

from .models import LLMModel, Provider, Run, ToolCall


def run_get_for_user(*, user, run_id) -> Run:
    """The run if ``user`` may see its thread; Http404 otherwise (also for bad ids)."""
    try:
        run = Run.objects.select_related("thread").get(pk=run_id)
        thread_get_for_user(user=user, thread_id=run.thread_id, reading=f"run:{run.pk}")
    except Exception as exc:  # unknown, malformed or not visible: one answer for all
        raise Http404("No such run.") from exc
    return run


def provider_list() -> QuerySet[Provider]:
    return Provider.objects.filter(enabled=True).order_by("name")


def provider_list_configured() -> list[Provider]:
    """Enabled providers this process has a key for (``provider_keys.key_status``), by name:
    those a new thread may be given without failing ``not_configured``."""
    from .provider_keys import key_status

    return [p for p in provider_list() if key_status(p) is None]


def provider_get(*, slug: str) -> Provider:
    try:
        return Provider.objects.get(slug=slug, enabled=True)
    except Provider.DoesNotExist as exc:
        raise Http404("No such provider.") from exc


def model_list_for_provider(*, provider: Provider, role_names=None) -> QuerySet[LLMModel]:
    """Enabled models of ``provider``; with ``role_names`` (an iterable of role names) only
    those one of these roles may use (rows without roles are for every role)."""
    models = provider.models.filter(enabled=True)
    if role_names is not None:
        models = models.filter(Q(allowed_roles__isnull=True) | Q(allowed_roles__name__in=list(role_names))).distinct()
    return models.order_by("name")


def role_names_for_user(*, user, workspace_id=None) -> set[str]:
    """The caller's role names: in ``workspace_id``, or in every workspace they belong to."""
    return set(memberships_for_user(user=user, workspace_id=workspace_id).values_list("role__name", flat=True))


def model_row(*, provider: Provider | None, name: str, memo=None):
    """The ``LLMModel`` row ``name`` of ``provider`` with its price (the usage app's
    ``price``, joined) and ``allowed_role_names`` (a frozenset; empty: every role), or None
    (no provider, no name, no row). Kept per process while the configuration does not change
    (``chatplatform.config_cache``): shared, read-only. ``memo``: an object that lives for one
    request or one turn (the request's thread, the turn's ``run.thread``) to keep the answer
    on, so the checks and the metering of one send or one turn look it up once."""
    if provider is None or not name:
        return None
    rows = memo.__dict__.setdefault("_model_rows", {}) if memo is not None else {}
    key = (provider.pk, name)
    if key not in rows:
        rows[key] = config_cached(("model_row", *key), lambda: _model_row_read(provider_id=provider.pk, name=name))
    return rows[key]


def _model_row_read(*, provider_id, name: str) -> LLMModel | None:
    row = LLMModel.objects.filter(provider_id=provider_id, name=name).select_related("price").first()
    if row is not None:
        row.allowed_role_names = frozenset(row.allowed_roles.values_list("name", flat=True))
    return row


def model_allowed(*, provider: Provider, model: str, role_names, memo=None) -> bool:
    """Whether a run may use ``model`` (empty: the provider's default) of ``provider`` for a
    user with one of ``role_names``: its row is enabled and names none of the roles or one of
    these; a name without a row only when it is the provider's ``default_model`` (an
    administrator named it on the provider). Any other name is refused: the organisation's
    key never pays for a model nobody enabled. ``memo``: as for :func:`model_row`."""
    name = (model or "").strip() or provider.default_model
    row = model_row(provider=provider, name=name, memo=memo)
    if row is None:
        return bool(name) and name == provider.default_model
    if not row.enabled:
        return False
    return not row.allowed_role_names or bool(row.allowed_role_names & set(role_names))


def model_takes_images(*, provider: Provider | None, model: str, memo=None) -> bool:
    """Whether a run of ``model`` (empty: the provider's default) on ``provider`` can be given
    images: the adapter sends them and the model reads them (its row's ``supports_images``,
    else its name; ``llm.capabilities.takes_images``)."""
    if provider is None:
        return False
    name = (model or "").strip() or provider.default_model
    row = model_row(provider=provider, name=name, memo=memo)
    return takes_images(provider, name, row.supports_images if row is not None else None)


def tool_call_list_for_user(*, user, status: str = "") -> QuerySet[ToolCall]:
    """Tool calls of runs in threads the user may see: their own threads, and every saved
    thread of the workspaces they administer (a member's temporary chat is its owner's alone,
    as at every other door). ``status`` filters (e.g. ``awaiting_approval``)."""
    from django.db.models import Q

    admin_workspaces = memberships_for_user(user=user, admin=True).values("workspace_id")
    member_workspaces = memberships_for_user(user=user).values("workspace_id")
    qs = ToolCall.objects.select_related("run__thread__workspace").filter(
        Q(run__thread__owner=user, run__thread__workspace_id__in=member_workspaces)
        | Q(run__thread__workspace_id__in=admin_workspaces, run__thread__temporary=False)
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at")


def tool_call_get_for_user(*, user, tool_call_id) -> ToolCall:
    """Http404 unless the call's thread is visible to the user (also for malformed ids). An admin
    blind to the thread gets the call too — the ledger is metadata; the serializer leaves out its
    arguments and result (``chat.api.tool_calls``)."""
    try:
        tool_call = ToolCall.objects.select_related("run__thread", "decided_by").get(pk=tool_call_id)
        thread_get_for_user(user=user, thread_id=tool_call.run.thread_id, metadata=True)
    except Exception as exc:  # unknown, malformed or not visible: one answer for all
        raise Http404("No such tool call.") from exc
    return tool_call


def default_model_for(*, user, workspace_id) -> tuple[Provider | None, str, str]:
    """The model a new chat of ``user`` in ``workspace_id`` starts with: ``(provider, model,
    source)``, the first of these that is usable — its provider enabled and set up (its key is
    there: ``provider_keys.key_status``) and the model allowed for the user's role in that
    workspace (:func:`model_allowed`):

    1. the user's own default (settings page; ``source`` ``"user"``),
    2. the workspace's default (admin; ``"workspace"``),
    3. the first real language-model provider by name (``capabilities(p).language_model``:
       OpenAI-compatible, Anthropic, Ollama) with its default model (``"platform"``),
    4. a provider with an adapter that is not a language model — the rule-based Offline one
       (``"offline"``); never a remote agent on its own.

    ``(None, "", "")`` when none is usable (no provider enabled for them at all). A chosen
    default whose model is empty means its provider's default model."""
    from chat.models import UserPreferences, Workspace
    from llm.capabilities import capabilities

    from .provider_keys import key_status

    roles = role_names_for_user(user=user, workspace_id=workspace_id)
    candidates: list[tuple[Provider | None, str, str]] = []
    prefs = UserPreferences.objects.filter(user=user).select_related("default_provider").first()
    if prefs is not None and prefs.default_provider is not None:
        candidates.append((prefs.default_provider, prefs.default_model, "user"))
    workspace = Workspace.objects.filter(pk=workspace_id).select_related("default_provider").first()
    if workspace is not None and workspace.default_provider is not None:
        candidates.append((workspace.default_provider, workspace.default_model, "workspace"))
    enabled = list(provider_list())
    candidates += [(p, "", "platform") for p in enabled if capabilities(p).language_model]
    candidates += [(p, "", "offline") for p in enabled if capabilities(p).adapter and not capabilities(p).language_model]
    for provider, model, source in candidates:
        model = (model or "").strip() or provider.default_model
        if (provider.enabled and model and key_status(provider) is None
                and model_allowed(provider=provider, model=model, role_names=roles)):
            return provider, model, source
    return None, "", ""


def model_choices_for(*, user, workspace_id=None) -> list[dict]:
    """The models ``user`` may pick (in ``workspace_id``, else in any of their workspaces),
    grouped by provider: ``[{"provider": Provider, "models": [LLMModel | None-row dict]}]`` —
    each enabled, set-up provider (``key_status``) by name, with its enabled models the
    user's role may use (its ``default_model`` first when it has no row: an admin named it).
    A provider with nothing usable is left out."""
    from .provider_keys import key_status

    roles = role_names_for_user(user=user, workspace_id=workspace_id)
    groups = []
    for provider in provider_list():
        if key_status(provider) is not None:
            continue
        rows = list(model_list_for_provider(provider=provider, role_names=roles).select_related("provider"))
        names = {m.name for m in rows}
        if provider.default_model and provider.default_model not in names and model_allowed(
                provider=provider, model=provider.default_model, role_names=roles):
            rows.insert(0, LLMModel(provider=provider, name=provider.default_model))
        if rows:
            groups.append({"provider": provider, "models": rows})
    return groups


def model_choice_parse(*, user, value: str, workspace_id=None) -> tuple[Provider | None, str]:
    """``"provider/model"`` (or ``"provider"``: its default model) → ``(provider, model)`` when
    it is one of :func:`model_choices_for` ``user`` (in ``workspace_id``, else any workspace of
    theirs); ``""`` → ``(None, "")`` (no choice). Raises ``ServiceError`` ``model_not_allowed``
    (400) naming the value otherwise."""
    from chatplatform.errors import ServiceError

    value = (value or "").strip()
    if not value:
        return None, ""
    slug, _, model = value.partition("/")
    for group in model_choices_for(user=user, workspace_id=workspace_id):
        provider = group["provider"]
        if provider.slug == slug:
            name = model or provider.default_model
            if any(m.name == name for m in group["models"]):
                return provider, name
    raise ServiceError("model_not_allowed", gettext("%(value)r is not a model you may use here (pick one of the "
                                              "listed models).") % {"value": value[:200]}, 400)
