"""The usage app's :class:`agents.metering.Meter`: installed at ``ready()``."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ObjectDoesNotExist

from chatplatform import tracing

from . import metrics
from .logs import run_context
from .models import Budget, ModelPrice
from .services import (
    Hold,
    budget_admit,
    budget_check,
    budget_release,
    budget_release_stale,
    budget_warnings,
    budgets_for,
    message_usage,
    tool_limit_reason,
    usage_record,
)

logger = logging.getLogger("chatplatform.runs")


def _model_row(provider, model: str, memo):
    """The ``LLMModel`` row of ``model`` at ``provider``, with its price; None when unknown.
    Read once per ``memo`` (the request's thread, the turn's thread: ``agents.selectors.model_row``)."""
    from agents.selectors import model_row

    return model_row(provider=provider, name=model, memo=memo)


@dataclass(frozen=True)
class _RunUsage:
    """What metering needs of a run's model for one turn, read once: the model row's id, its
    price (None: unpriced) and the budgets that apply. Kept on the run object, so it lives as
    long as the turn (a price or budget changed mid-turn applies from the next turn)."""

    model_id: int | None
    price: ModelPrice | None
    budgets: list[Budget]


def _run_usage(run) -> _RunUsage:
    cached = getattr(run, "_run_usage", None)
    if cached is None:
        row = _model_row(run.provider, run.model, run.thread)
        try:
            price = row.price if row is not None else None
        except ObjectDoesNotExist:
            price = None
        model_id = row.pk if row is not None else None
        budgets = budgets_for(user_id=run.user_id, workspace_id=run.thread.workspace_id, model_id=model_id)
        cached = run._run_usage = _RunUsage(model_id, price, budgets)
    return cached


class UsageMeter:
    def before_run(self, *, user, thread) -> None:
        row = _model_row(thread.provider, thread.model, thread)
        budget_check(user_id=user.pk, workspace_id=thread.workspace_id, model_id=row.pk if row is not None else None)

    def before_round(self, *, run, cost=None) -> Hold:
        usage = _run_usage(run)
        return budget_admit(user_id=run.user_id, workspace_id=run.thread.workspace_id, model_id=usage.model_id,
                            price=usage.price, budgets=usage.budgets, run_id=run.pk, cost=cost)

    def after_round(self, *, run, message, usage, hold: Any, emitter) -> dict:
        counts = usage.as_dict() if usage is not None else None
        run_usage = _run_usage(run)
        record = usage_record(run=run, message=message, usage=counts, hold=hold, price=run_usage.price)
        metrics.record_tokens(provider=record.provider if record else "", model=run.model, usage=counts)
        for warning in budget_warnings(user_id=run.user_id, workspace_id=run.thread.workspace_id,
                                       model_id=run_usage.model_id, budgets=run_usage.budgets,
                                       windows=getattr(record, "windows", None)):
            emitter.emit("budget.warning", **warning)
        return message_usage(record, counts)

    def release(self, hold: Any) -> None:
        budget_release(hold)

    def recover(self, *, run_id) -> None:
        budget_release_stale(run_id=run_id)

    def tool_over_limit(self, *, run, tool_name: str) -> str | None:
        return tool_limit_reason(user_id=run.user_id, workspace_id=run.thread.workspace_id, tool_name=tool_name)

    @contextlib.contextmanager
    def run_scope(self, *, run):
        provider = run.provider.slug if run.provider else ""
        with run_context(run_id=run.pk, thread_id=run.thread_id, user_id=run.user_id):
            logger.info("run turn starts (provider %s, model %s, attempt %s)", provider or "-", run.model or "-",
                        run.attempts)
            try:
                if not tracing.tracing_on():
                    yield
                    return
                with tracing.tracer().start_as_current_span(
                    "run", attributes={"run.id": str(run.pk), "thread.id": str(run.thread_id),
                                       "user.id": str(run.user_id), "provider": provider, "model": run.model},
                ):
                    yield
            finally:
                logger.info("run turn ends")

    def span(self, name: str, **attributes):
        if not tracing.tracing_on():
            return contextlib.nullcontext()
        return tracing.tracer().start_as_current_span(name, attributes={k: str(v) for k, v in attributes.items()})
