"""The usage app's :class:`agents.metering.Meter`: installed at ``ready()``."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from chatplatform import tracing

from . import metrics
from .logs import run_context
from .services import (
    Hold,
    budget_admit,
    budget_check,
    budget_release,
    budget_warnings,
    message_usage,
    price_for,
    tool_limit_reason,
    usage_record,
)

logger = logging.getLogger("chatplatform.runs")


def _model_id(provider, model: str) -> int | None:
    from agents.models import LLMModel

    if provider is None or not model:
        return None
    return LLMModel.objects.filter(provider=provider, name=model).values_list("pk", flat=True).first()


class UsageMeter:
    def before_run(self, *, user, thread) -> None:
        budget_check(user_id=user.pk, workspace_id=thread.workspace_id,
                     model_id=_model_id(thread.provider, thread.model))

    def before_round(self, *, run) -> Hold:
        return budget_admit(user_id=run.user_id, workspace_id=run.thread.workspace_id,
                            model_id=_model_id(run.provider, run.model),
                            price=price_for(provider=run.provider, model=run.model))

    def after_round(self, *, run, message, usage, hold: Any, emitter) -> dict:
        counts = usage.as_dict() if usage is not None else None
        record = usage_record(run=run, message=message, usage=counts, hold=hold)
        metrics.record_tokens(provider=record.provider if record else "", model=run.model, usage=counts)
        for warning in budget_warnings(user_id=run.user_id, workspace_id=run.thread.workspace_id,
                                       model_id=_model_id(run.provider, run.model)):
            emitter.emit("budget.warning", **warning)
        return message_usage(record, counts)

    def release(self, hold: Any) -> None:
        budget_release(hold)

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
