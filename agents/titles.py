"""Chat titles written by the model after the first answer (issue 54).

A new chat is titled with its first question, cut (``chat.services.title_from_message``) —
at once, so the rail never shows "New chat". After the first answer completes,
:func:`title_after_first_answer` asks the chat's own model, with the **small prompt tier**
(a short fixed prompt, the question and the start of the answer, the small tier's provider
options — Ollama's ``num_ctx``/``think`` — and a few output tokens), for a short title, and
replaces the cut question with it when:

* ``CHAT_TITLE_GENERATION`` is on (default);
* the run is the thread's first completed run;
* the thread's provider is a language model (not the rule-based Offline provider: no title
  call; not a remote agent);
* the title is still the cut question (a chat the person renamed keeps their name — also when
  the rename lands while the title request is under way: the update is conditional).

The title request is a model call like any other: it is metered (``agents.metering``) — the
budgets admit it first (``before_round``: a spent budget means no title call; the granted output
cap applies) and its usage is recorded against the run, its user, workspace and thread
(``after_round``, a usage record without a message), so usage and budgets hold; a failed
request gives its reservation back. Any failure (the provider errs or times out, an empty or
unusable answer, a refusing budget) keeps the cut question; nothing is retried. The new title goes to the thread's sockets as
``thread.renamed {thread_id, title}``. The model's words are untrusted text: one line,
control characters dropped, quotes and a "Title:" prefix stripped, ≤ ``TITLE_MAX_CHARS``.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings

logger = logging.getLogger(__name__)

TITLE_SYSTEM_PROMPT = (
    "You name chat conversations. Reply with a title of at most six words for the conversation below, "
    "in the language of the question. Reply with the title only: no quotes, no punctuation at the end."
)
TITLE_OUTPUT_TOKENS = 24
TITLE_INPUT_CHARS = 1500  # of the question and of the answer each: enough to name it, cheap on any model
THREAD_RENAMED = "thread.renamed"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_PREFIX = re.compile(r"^\s*(?:title|titel|titre|título)\s*[:：-]\s*", re.IGNORECASE)


def title_clean(text: str, *, max_chars: int | None = None) -> str:
    """The model's answer as a title: its first non-empty line, without control or
    bidirectional-override characters, a "Title:" prefix, surrounding quotes, Markdown
    emphasis or a final full stop; cut at a word to ``max_chars`` (``TITLE_MAX_CHARS``). ""
    when nothing usable is left."""
    from chat.services import TITLE_MAX_CHARS

    limit = max_chars or TITLE_MAX_CHARS
    line = next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    line = _CONTROL.sub("", line)
    line = _PREFIX.sub("", line).strip()
    for _ in range(2):  # "Title." in quotes, or a quoted title and a full stop
        line = line.strip("*_#`").strip().strip("\"'“”‘’«»「」『』").strip()
        line = re.sub(r"[.。]+$", "", line).strip()
    line = " ".join(line.split())
    if len(line) > limit:
        cut = line.rfind(" ", 0, limit - 1)
        line = line[: cut if cut > limit // 3 else limit - 1].rstrip() + "…"
    return line


def title_after_first_answer(*, run_id) -> str | None:
    """Write the title of ``run_id``'s thread if this was its first answer (rules above).
    Returns the new title, or None when none was written. Never raises: a title is a nicety,
    the answer is already complete."""
    if not getattr(settings, "CHAT_TITLE_GENERATION", True):
        return None
    try:
        return _title_after_first_answer(run_id)
    except Exception:  # noqa: BLE001 — logged; the chat keeps the cut question
        logger.exception("title for run %s: not generated", run_id)
        return None


def _title_after_first_answer(run_id) -> str | None:
    from chat.models import Message, Thread
    from chat.services import title_from_message
    from llm import ChatMessage, ChatRequest, Finish, ProviderError, TextDelta, adapter_for
    from llm.capabilities import capabilities

    from .loop.tiers import SMALL, provider_options
    from .metering import DispatchRefused, granted_output_tokens, meter
    from .models import Run
    from .provider_keys import provider_api_key
    from .round_cost import round_cost

    run = Run.objects.select_related("thread", "provider", "user_message").filter(pk=run_id).first()
    if run is None or run.provider is None or run.user_message is None:
        return None
    if run.thread.temporary:
        return None  # a temporary chat is not kept: nothing to name it for, no call
    provider = run.provider
    if not capabilities(provider).language_model:
        return None  # no model to ask (Offline), or a remote agent that would act on it
    if Run.objects.filter(thread_id=run.thread_id, status=Run.Status.COMPLETED).exclude(pk=run.pk).exists():
        return None  # not the first answer
    question = run.user_message.content
    cut = title_from_message(question)
    if not cut or run.thread.title != cut:
        return None  # renamed (or titled otherwise, e.g. "About: …")
    answer = (Message.objects.filter(run=run, role=Message.Role.ASSISTANT).exclude(content="")
              .order_by("-position").values_list("content", flat=True).first() or "")
    request = ChatRequest(
        model=run.model or provider.default_model,
        system=TITLE_SYSTEM_PROMPT,
        messages=[ChatMessage(role="user", content=(
            f"Question:\n{question[:TITLE_INPUT_CHARS]}\n\nAnswer:\n{answer[:TITLE_INPUT_CHARS]}"))],
        max_output_tokens=TITLE_OUTPUT_TOKENS,
        options=provider_options(SMALL, provider),
    )
    try:
        hold = meter().before_round(run=run, cost=round_cost(request))
    except DispatchRefused as exc:
        logger.info("title for thread %s: not asked, %s", run.thread_id, exc.message)
        return None
    if (granted := granted_output_tokens(hold)) is not None:
        request.max_output_tokens = min(granted, TITLE_OUTPUT_TOKENS)
    parts, usage = [], None
    try:
        adapter = adapter_for(provider, api_key=provider_api_key(provider), max_retries=0,
                              read_timeout_s=settings.CHAT_TITLE_TIMEOUT_S)
        for event in adapter.stream(request):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Finish):
                usage = event.usage
    except ProviderError as exc:
        meter().release(hold)
        logger.info("title for thread %s: the provider answered %s (%s); the question stays the title",
                    run.thread_id, exc.code, exc)
        return None
    except BaseException:
        meter().release(hold)
        raise
    # Usage like any round's; budget warnings are not sent on the finished run's stream (the
    # page reads the budgets again on load and after every run).
    meter().after_round(run=run, message=None, usage=usage, hold=hold, emitter=_NO_EVENTS)
    title = title_clean("".join(parts))
    if not title:
        return None
    # Conditional: a rename while the request was under way wins. updated_at is left alone
    # (a title is not activity: the rail's order stays).
    if not Thread.objects.filter(pk=run.thread_id, title=cut).update(title=title):
        return None
    _announce(run.thread_id, title)
    return title


class _NoEvents:
    """An emitter for a call outside a run's stream: what the meter would emit is dropped."""

    def emit(self, *_args, **_fields) -> None:
        return None


_NO_EVENTS = _NoEvents()


def _announce(thread_id, title: str) -> None:
    """``thread.renamed {thread_id, title}`` to the thread's sockets (best effort: the page
    also re-reads the thread after each run)."""
    from channels.layers import get_channel_layer

    from chatplatform.loops import run_coroutine

    from .event_types import check_event
    from .events import thread_group

    fields = {"thread_id": str(thread_id), "title": title}
    check_event(THREAD_RENAMED, fields)
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        run_coroutine(layer.group_send(thread_group(thread_id),
                                       {"type": THREAD_RENAMED, "event": {"type": THREAD_RENAMED, **fields}}),
                      timeout=5)
    except Exception:  # noqa: BLE001
        logger.warning("title for thread %s: could not tell its sockets", thread_id)
