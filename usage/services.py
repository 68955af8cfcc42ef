"""Writes for usage: records with their cost, budget holds and warnings.

How a hard limit holds under concurrency (SQLite and PostgreSQL alike)
----------------------------------------------------------------------
Before every model request a run takes a *hold* on the current window of each budget that
applies to it (:func:`budget_admit`). In one transaction it first locks the window rows
(PostgreSQL ``SELECT … FOR UPDATE`` in primary-key order; on SQLite a write takes the
database write lock). Only then does it read the spend (the committed usage records of the
window) and the rounds in flight, decide, and count its own round in ``in_flight``. A
round's usage record and the release of its hold are written in one transaction
(:func:`usage_record`), so a reader sees either the round in flight or its usage, never
neither.

The spend of a window is kept on its row (``BudgetWindow.spent``): summed from the usage
records once, when the row is made, then counted up by every record stored in the period
(:func:`usage_record`, in the record's transaction). So a check or an admission reads one
row per budget however many records the period holds; before, each summed the period's
records (three sums per run, 30 % of a run's worker CPU in ``bench/run_cpu.py``, growing with
the month's usage). Saving a budget recounts its windows from the records (an admin's edit
of its scope or metric, or of records — deleting records alone gives nothing back).

A round reserves what it can really cost: its input estimate (``agents.round_cost``: the
request's bytes / ``BUDGET_BYTES_PER_TOKEN``) plus the output cap it sends as ``max_tokens``,
priced at the model's rates for cost budgets. The cap is the request's own (else
``BUDGET_ROUND_MAX_OUTPUT_TOKENS``) cut to what is left of each budget after its spend and
the reservations of the rounds in flight (``BudgetWindow.reserved``); when that leaves fewer
than ``BUDGET_MIN_OUTPUT_TOKENS`` the round is refused (``budget_exceeded``: "busy" while
other rounds hold the rest). The round's usage record settles the reservation (takes it off
``reserved`` and adds the real usage to ``spent``) in one transaction; a failed or cancelled
round gives it back, and so does the next attempt or the reaper for a worker that died
mid-round (the hold is recorded on the run). So the reservations in flight plus the spend
never pass the hard limit, and the spend can pass it only by what providers count beyond
the estimate: Σ over the rounds admitted last of (real input − estimated input), output
being capped by ``max_tokens``. A round whose cost is not known ahead (an agent backend)
reserves ``BUDGET_ROUND_RESERVE_TOKENS``. A hold whose worker died and was never recovered
is forgotten after ``BUDGET_HOLD_S``.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import reduce

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from agents.metering import DispatchRefused
from agents.models import LLMModel, Run
from agents.round_cost import RoundCost
from chatplatform.config_cache import config_cached
from chatplatform.db import retry_transient
from chatplatform.periods import window_bounds

from .models import Budget, BudgetWindow, ModelPrice, Period, ToolLimit, UsageRecord

logger = logging.getLogger(__name__)

MILLION = Decimal(1_000_000)
COST_PLACES = Decimal("0.00000001")


# -- cost ------------------------------------------------------------------------------------
def usage_cost(*, price: ModelPrice | None, usage: dict) -> Decimal | None:
    """Cost of one response at ``price`` (per million tokens): uncached input at the input
    price, cached input at the cached price (default: the input price), output at the output
    price. None when there is no price or the provider gave no token counts."""
    if price is None or (usage.get("input_tokens") is None and usage.get("output_tokens") is None):
        return None
    input_tokens = int(usage.get("input_tokens") or 0)
    cached = min(int(usage.get("cached_tokens") or 0), input_tokens)
    cached_price = price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
    cost = (
        Decimal(input_tokens - cached) * price.input_per_mtok
        + Decimal(cached) * cached_price
        + Decimal(int(usage.get("output_tokens") or 0)) * price.output_per_mtok
    ) / MILLION
    return cost.quantize(COST_PLACES)


def price_for(*, provider, model: str) -> ModelPrice | None:
    if provider is None or not model:
        return None
    return ModelPrice.objects.filter(model__provider=provider, model__name=model).first()



def budgets_for(*, user_id, workspace_id, model_id) -> list[Budget]:
    """Enabled budgets that apply to a run of ``user_id`` in ``workspace_id`` on ``model_id``
    (None: a model without a row), by primary key. From :func:`_enabled_budgets`: one
    statement while the configuration does not change. Shared instances: read-only."""
    budgets, _names = config_cached("budgets", _enabled_budgets)
    return [budget for budget in budgets if budget.workspace_id in (None, workspace_id)
            and budget.user_id in (None, user_id) and budget.model_id in (None, model_id)]


def budgets_for_record(record: UsageRecord) -> list[Budget]:
    """Enabled budgets whose scope holds ``record`` (its workspace, user, and model by
    provider slug and name), by primary key; as :func:`budgets_for`."""
    budgets, names = config_cached("budgets", _enabled_budgets)
    return [budget for budget in budgets if budget.workspace_id in (None, record.workspace_id)
            and budget.user_id in (None, record.user_id)
            and (budget.model_id is None or names.get(budget.model_id) == (record.provider, record.model))]


def _enabled_budgets() -> tuple[list[Budget], dict[int, tuple[str, str]]]:
    """Every enabled budget, by primary key, and the ``(provider slug, name)`` of the models
    they name (as usage records name their model): kept per process while the configuration
    does not change (``chatplatform.config_cache``; budgets, models and providers are governed)."""
    budgets = list(Budget.objects.filter(enabled=True).order_by("pk"))
    return budgets, _model_names({budget.model_id for budget in budgets if budget.model_id})


def _model_names(model_ids: set[int]) -> dict[int, tuple[str, str]]:
    """Model id → ``(provider slug, name)``, as usage records name their model (no statement
    for no ids)."""
    if not model_ids:
        return {}
    rows = LLMModel.objects.filter(pk__in=model_ids).values_list("pk", "provider__slug", "name")
    return {pk: (slug, name) for pk, slug, name in rows}


def budget_spent(budget: Budget, start: datetime, end: datetime) -> Decimal:
    """Tokens (input + output) or cost in the budget's currency, of the budget's scope in
    ``[start, end)``, from the stored usage records."""
    return budgets_spent([(budget, start, end)])[0]


def budgets_spent(plan: list[tuple[Budget, datetime, datetime]]) -> list[Decimal]:
    """:func:`budget_spent` of each ``(budget, start, end)``, in one statement (a filtered SUM
    per budget over the records any of them counts); one more reads the provider slug and
    name of the models that budgets name, as records store them."""
    if not plan:
        return []
    names = _model_names({budget.model_id for budget, _start, _end in plan if budget.model_id})
    scopes, sums = [], {}
    for i, (budget, start, end) in enumerate(plan):
        scope = Q(created_at__gte=start, created_at__lt=end)
        if budget.workspace_id:
            scope &= Q(workspace_id=budget.workspace_id)
        if budget.user_id:
            scope &= Q(user_id=budget.user_id)
        if budget.model_id:
            slug, name = names.get(budget.model_id, ("", ""))
            scope &= Q(provider=slug, model=name)
        if budget.metric == Budget.Metric.COST:
            scope &= Q(currency=budget.currency)
            sums[f"s{i}"] = Sum("cost", filter=scope)
        else:
            sums[f"s{i}"] = (Coalesce(Sum("input_tokens", filter=scope), 0)
                             + Coalesce(Sum("output_tokens", filter=scope), 0))
        scopes.append(scope)
    row = UsageRecord.objects.filter(reduce(operator.or_, scopes)).aggregate(**sums)
    return [Decimal(row[f"s{i}"] or 0) for i in range(len(plan))]


def _in_lock_order(windows):
    """``windows`` (a queryset) ordered by primary key and, where the database has row locks
    (PostgreSQL), locked ``FOR UPDATE`` for the rest of the transaction: every writer of
    windows locks in this order, so two never wait for each other's rows crosswise."""
    windows = windows.order_by("pk")
    return windows.select_for_update() if connection.features.has_select_for_update else windows


def _windows(pairs: list[tuple[Budget, datetime]], *, lock: bool = False) -> list[BudgetWindow]:
    """The window row of each ``(budget, start)`` in one statement (the common case); a
    missing one is created (:func:`_window_create`). ``lock``: inside a transaction, lock
    the rows for the rest of it and read their holds — PostgreSQL ``SELECT … FOR UPDATE`` in
    primary-key order (the order keeps two admissions from deadlocking); SQLite has no row
    locks, so a write takes its database write lock first; created rows are then locked too."""
    if not pairs:
        return []
    scope = reduce(operator.or_, (Q(budget=budget, starts_at=start) for budget, start in pairs))
    windows = BudgetWindow.objects.filter(scope)
    if lock:
        windows = _in_lock_order(windows)
        if not connection.features.has_select_for_update:
            BudgetWindow.objects.filter(scope).update(in_flight=F("in_flight"))
    found = {(w.budget_id, w.starts_at): w for w in windows}
    missing = [(budget, start) for budget, start in pairs if (budget.pk, start) not in found]
    if missing and lock:  # the first round of a window: create, then lock them all
        for budget, start in missing:
            _window_create(budget, start)
        return _windows(pairs, lock=True)
    return [found.get((budget.pk, start)) or _window_create(budget, start) for budget, start in pairs]


def _window_create(budget: Budget, start: datetime) -> BudgetWindow:
    """The window row, made if missing with the spend of the records already in its period."""
    return _window_get_or_create(budget, start)[0]


def _window_get_or_create(budget: Budget, start: datetime) -> tuple[BudgetWindow, bool]:
    """``(window, made)``: made here, its ``spent`` sums the records this transaction sees
    (on PostgreSQL a concurrent maker's unique key is waited for, then its row is returned)."""
    end = window_bounds(budget.period, start)[1]
    for attempt in range(2):
        try:
            with transaction.atomic():
                return BudgetWindow.objects.get_or_create(
                    budget=budget, starts_at=start, defaults={"spent": budget_spent(budget, start, end)})
        except IntegrityError:  # created concurrently
            if attempt:
                raise
    raise AssertionError("unreachable")


def _amount(budget: Budget, record: UsageRecord) -> Decimal:
    """What ``record`` adds to ``budget``'s spend: its tokens (input + output), or its cost
    when it is priced in the budget's currency."""
    if budget.metric == Budget.Metric.COST:
        return record.cost if record.cost is not None and record.currency == budget.currency else Decimal(0)
    return Decimal((record.input_tokens or 0) + (record.output_tokens or 0))


def usage_count(record: UsageRecord, *, give_back: dict[int, Decimal] | None = None
                ) -> dict[int, tuple[int, Decimal, bool]]:
    """Add a stored ``record`` to the window of its period of each enabled budget it falls
    under — :func:`usage_record` does, in the record's transaction; so must anything else
    that writes usage records one by one (bulk writers recount: :func:`budget_windows_recount`).

    The budgets are read here, in the transaction, not taken from the run: one created,
    edited (scope, metric) or deleted while the round streamed counts as it is now. Every
    window touched — counted, and ``give_back``: ``{window_id: reserved}`` of the round's hold,
    one round fewer in flight and its reservation settled (taken off ``reserved``) — is locked in primary-key order, as admissions lock them, and read in the
    same statement. A window not made yet (the period's first record) is made then, as an
    admission makes one, and the windows are locked again: made here, its sum includes the
    record; made meanwhile by another transaction (which cannot see this uncommitted record),
    it is counted up like the others. The new values are computed from the locked rows (no
    other writer can change them before this transaction ends; SQLite's IMMEDIATE transaction
    holds the write lock) and written one plain ``UPDATE`` per window: cheaper to build than
    one ``CASE`` statement over all (``bench/run_cpu.py``).
    Returns ``{budget_id: (window_id, spent, warned)}`` of the windows counted, as written."""
    amounts = {}
    for budget in budgets_for_record(record):
        amount = _amount(budget, record)
        if amount:
            amounts[(budget.pk, window_bounds(budget.period, record.created_at)[0])] = (budget, amount)
    give_back = dict(give_back or {})
    if not amounts and not give_back:
        return {}
    scope = reduce(operator.or_, (Q(budget_id=b, starts_at=start) for b, start in amounts), Q(pk__in=list(give_back)))
    with transaction.atomic(savepoint=False):
        made: set[tuple[int, datetime]] = set()
        locked = list(_in_lock_order(BudgetWindow.objects.filter(scope)))
        have = {(w.budget_id, w.starts_at) for w in locked}
        if any(key not in have for key in amounts):
            for key, (budget, _) in amounts.items():
                if key not in have and _window_get_or_create(budget, key[1])[1]:
                    made.add(key)  # its sum has the record
            locked = list(_in_lock_order(BudgetWindow.objects.filter(scope)))
        out = {}
        for window in locked:
            key = (window.budget_id, window.starts_at)
            spent = window.spent + (amounts[key][1] if key in amounts and key not in made else Decimal(0))
            in_flight, reserved = window.in_flight, window.reserved
            if window.pk in give_back:
                in_flight, reserved = max(in_flight - 1, 0), max(reserved - give_back[window.pk], Decimal(0))
            if spent != window.spent or in_flight != window.in_flight or reserved != window.reserved:
                _window_set(window.pk, spent=spent, in_flight=in_flight, reserved=reserved)
            if key in amounts:
                out[window.budget_id] = (window.pk, spent, window.warned)
    return out


def _window_set(window_id: int, *, spent: Decimal, in_flight: int, reserved: Decimal) -> None:
    """Write a locked window's new spend, rounds in flight and their reservations (:func:`usage_count`)."""
    BudgetWindow.objects.filter(pk=window_id).update(spent=spent, in_flight=in_flight, reserved=reserved)


def budget_windows_recount(budget: Budget) -> None:
    """Set each window of ``budget`` to the spend of the records in its period (after the
    budget's scope or metric changed, or records were added in bulk). Each row is locked
    first, so a record stored meanwhile is counted once: before the sum, or after it."""
    with transaction.atomic():
        for window in _in_lock_order(BudgetWindow.objects.filter(budget=budget)):
            start, end = window.starts_at, window_bounds(budget.period, window.starts_at)[1]
            BudgetWindow.objects.filter(pk=window.pk).update(spent=budget_spent(budget, start, end))


# -- holds -----------------------------------------------------------------------------------
@dataclass
class Hold:
    """What a round reserved on each window it holds (released when its usage is stored or it
    fails): ``window_ids`` and, in the same order, ``reserved`` — tokens, or cost in the
    budget's currency. ``max_output_tokens``: the output cap the round was granted (the
    request sends it as ``max_tokens``; None: the round's cost was not known ahead, or no hard
    limit applies). With ``run_id`` the hold is also recorded on the run (``Run.budget_hold``,
    :meth:`recorded`), and released only while it is still recorded there: once, by its round
    or by :func:`budget_release_stale`."""

    window_ids: list[int] = field(default_factory=list)
    run_id: object = None
    reserved: list[Decimal] = field(default_factory=list)
    max_output_tokens: int | None = None

    def recorded(self) -> list:
        """As stored on ``Run.budget_hold``: ``[[window_id, "reserved"], …]``."""
        return [[pk, str(amount)] for pk, amount in self.amounts().items()]

    def amounts(self) -> dict[int, Decimal]:
        """``{window_id: reserved}`` (0 for a hold made without amounts)."""
        return {pk: (self.reserved[i] if i < len(self.reserved) else Decimal(0))
                for i, pk in enumerate(self.window_ids)}


def recorded_amounts(value) -> dict[int, Decimal]:
    """``Run.budget_hold`` as ``{window_id: reserved}``: ``[[id, "amount"], …]``, or a bare id
    (a hold recorded before reservations had amounts: one round in flight, nothing reserved)."""
    out: dict[int, Decimal] = {}
    for item in value or []:
        if isinstance(item, list | tuple):
            out[int(item[0])] = Decimal(str(item[1]))
        else:
            out[int(item)] = Decimal(0)
    return out


@dataclass(frozen=True)
class _Rates:
    """What one input and one output token add to a budget: 1 and 1 for a tokens budget, the
    model's price per token for a cost budget (None: unpriced, or priced in another currency —
    the round adds nothing to it)."""

    input: Decimal
    output: Decimal


def _rates(budget: Budget, price: ModelPrice | None) -> _Rates | None:
    if budget.metric == Budget.Metric.TOKENS:
        return _Rates(Decimal(1), Decimal(1))
    if price is None or price.currency != budget.currency:
        return None
    return _Rates(price.input_per_mtok / MILLION, price.output_per_mtok / MILLION)


def _reserve(budget: Budget, price: ModelPrice | None) -> Decimal:
    """The fixed reserve of a round whose cost is not known ahead (an agent backend's run)."""
    rates = _rates(budget, price)
    if rates is None:
        return Decimal(0)  # an unpriced model adds no cost
    return Decimal(settings.BUDGET_ROUND_RESERVE_TOKENS) * max(rates.input, rates.output)


_ADJECTIVE = {Period.DAY: "daily", Period.MONTH: "monthly"}


def _refusal(budget: Budget, spent: Decimal, end: datetime, *, busy: bool, left: Decimal | None = None,
             needed: Decimal | None = None) -> DispatchRefused:
    """``busy``: other rounds in flight hold the rest; ``left``/``needed`` (no other round
    holds anything): what is left is less than the request's input plus the smallest useful
    output, ``BUDGET_MIN_OUTPUT_TOKENS``."""
    now = timezone.now()
    unit = "tokens" if budget.metric == Budget.Metric.TOKENS else budget.currency
    scope = "this workspace" if budget.workspace_id and not budget.user_id else "your"
    if busy:
        return DispatchRefused(
            "budget_exceeded",
            f"The {_ADJECTIVE[budget.period]} budget of {scope} usage is nearly used up "
            f"({_fmt(spent)} of {_fmt(budget.hard_limit)} {unit}) and other replies are using the rest; "
            "try again in a moment.",
            retry_after=float(settings.BUDGET_BUSY_RETRY_S), resets_at=end.isoformat(),
        )
    if left is not None:
        return DispatchRefused(
            "budget_exceeded",
            f"The budget is nearly used up: {_fmt(spent)} of {_fmt(budget.hard_limit)} {unit} "
            f"{budget.get_period_display()}; the {_fmt(left)} {unit} left are too little for another reply "
            f"(it needs about {_fmt(needed)}). It resets at {end:%Y-%m-%d %H:%M} UTC.",
            retry_after=max(1.0, (end - now).total_seconds()), resets_at=end.isoformat(),
        )
    return DispatchRefused(
        "budget_exceeded",
        f"The budget is used up: {_fmt(spent)} of {_fmt(budget.hard_limit)} {unit} "
        f"{budget.get_period_display()}. It resets at {end:%Y-%m-%d %H:%M} UTC.",
        retry_after=max(1.0, (end - now).total_seconds()), resets_at=end.isoformat(),
    )


def _fmt(value: Decimal | None) -> str:
    if value is None:
        return "?"
    return f"{value.normalize():f}" if value != value.to_integral() else f"{int(value)}"


def limit_text(value: Decimal | None, *, metric: str, currency: str = "") -> str:
    """A budget amount as people read it: ``"800,000 tokens"``, ``"12.5 USD"`` — no trailing
    zeros of the column's six decimal places, thousands grouped; ``"—"`` for no limit."""
    if value is None:
        return "—"
    if metric == "tokens":
        return f"{int(value):,} tokens"
    text = f"{value.normalize():,f}" if value != value.to_integral() else f"{int(value):,}"
    return f"{text} {currency}".strip()


def budget_check(*, user_id, workspace_id, model_id) -> None:
    """Refuse (:class:`DispatchRefused`) when a hard limit that applies is already reached.
    Used before a run is created; takes no hold."""
    plan = [(budget, *window_bounds(budget.period))
            for budget in budgets_for(user_id=user_id, workspace_id=workspace_id, model_id=model_id)
            if budget.hard_limit is not None]
    windows = _windows([(budget, start) for budget, start, _end in plan])
    for (budget, _start, end), window in zip(plan, windows, strict=True):
        if window.spent >= budget.hard_limit:
            raise _refusal(budget, window.spent, end, busy=False)


def budget_admit(*, user_id, workspace_id, model_id, price: ModelPrice | None,
                 budgets: list[Budget] | None = None, run_id=None, cost: RoundCost | None = None) -> Hold:
    """Reserve one model round on every hard-limited budget that applies (see the module
    docstring), or raise :class:`DispatchRefused` and reserve nothing.

    ``cost``: what the round can cost — its input estimate and the output cap it would send
    (None: a cap of ``BUDGET_ROUND_MAX_OUTPUT_TOKENS``). The round is granted an output cap
    (``Hold.max_output_tokens``, at most ``cost``'s) that fits what is left of every budget
    after the spend and the other rounds' reservations, and reserves its input estimate plus
    that cap; it is refused when the cap would be under ``BUDGET_MIN_OUTPUT_TOKENS``. Without
    ``cost`` (an agent backend: its cost is not known ahead) it reserves
    ``BUDGET_ROUND_RESERVE_TOKENS`` and is admitted alone, or beside others while the rest
    covers it. ``budgets``: the :func:`budgets_for` these ids, when the caller has them
    already. ``run_id``: record the hold on the run (``Run.budget_hold``) in the same
    transaction."""
    if budgets is None:
        budgets = budgets_for(user_id=user_id, workspace_id=workspace_id, model_id=model_id)
    budgets = [b for b in budgets if b.hard_limit is not None]
    if not budgets:
        return Hold()
    bounds = [(budget, *window_bounds(budget.period)) for budget in budgets]
    now = timezone.now()
    with transaction.atomic():
        windows = _windows([(budget, start) for budget, start, _ in bounds], lock=True)  # locked: then read
        live = [(w.in_flight, w.reserved) if w.hold_until and w.hold_until > now else (0, Decimal(0))
                for w in windows]  # a stale hold counts as none
        cap, capped = None, False  # capped: a budget counts this round's tokens (else the request's cap stands)
        if cost is not None:
            cap = cost.max_output_tokens or settings.BUDGET_ROUND_MAX_OUTPUT_TOKENS
        for (budget, _start, end), window, (in_flight, reserved) in zip(bounds, windows, live, strict=True):
            spent = window.spent
            if spent >= budget.hard_limit:
                raise _refusal(budget, spent, end, busy=False)
            if cost is None:
                if in_flight and spent + reserved + _reserve(budget, price) > budget.hard_limit:
                    raise _refusal(budget, spent, end, busy=True)
                continue
            rates = _rates(budget, price)
            if rates is None:
                continue  # the round adds nothing to it
            left = budget.hard_limit - spent - reserved
            room = (left - cost.input_tokens * rates.input) / rates.output if rates.output else Decimal(cap)
            if room < settings.BUDGET_MIN_OUTPUT_TOKENS:
                if in_flight:
                    raise _refusal(budget, spent, end, busy=True)
                needed = cost.input_tokens * rates.input + settings.BUDGET_MIN_OUTPUT_TOKENS * rates.output
                raise _refusal(budget, spent, end, busy=False, left=max(left, Decimal(0)),
                               needed=needed.quantize(COST_PLACES) if budget.metric == Budget.Metric.COST else needed)
            cap, capped = min(cap, int(room)), True
        amounts = []
        for (budget, _start, _end), window, (in_flight, reserved) in zip(bounds, windows, live, strict=True):
            rates = _rates(budget, price)
            if cost is None:
                amount = _reserve(budget, price)
            else:
                amount = cost.input_tokens * rates.input + cap * rates.output if rates else Decimal(0)
            amounts.append(amount)
            BudgetWindow.objects.filter(pk=window.pk).update(
                in_flight=in_flight + 1, reserved=reserved + amount,
                hold_until=now + timedelta(seconds=settings.BUDGET_HOLD_S))
        granted = cap if capped else (cost.max_output_tokens if cost is not None else None)
        hold = Hold([window.pk for window in windows], run_id, amounts, granted)
        if run_id is not None:
            Run.objects.filter(pk=run_id).update(budget_hold=hold.recorded())
    return hold


def budget_release(hold: Hold | None) -> None:
    """Give back a round's reservation (it ended without a response: provider error, cancel).
    A hold recorded on its run is given back only if it is still recorded there (not already
    by :func:`budget_release_stale`)."""
    if not hold or not hold.window_ids:
        return
    with transaction.atomic(savepoint=False):
        if _hold_taken_back(hold):
            _give_back(hold.amounts())


def _hold_taken_back(hold: Hold) -> bool:
    """Clear a hold recorded on its run: True when this caller is the one to give it back."""
    return hold.run_id is None or bool(Run.objects.filter(pk=hold.run_id, budget_hold=hold.recorded()).update(
        budget_hold=[]))


def _give_back(amounts: dict[int, Decimal]) -> None:
    """One round fewer in flight and its reservation off each window (locked in primary-key
    order first, as admissions lock them: two writers never wait for each other's rows
    crosswise)."""
    if connection.features.has_select_for_update:
        list(_in_lock_order(BudgetWindow.objects.filter(pk__in=list(amounts))).values_list("pk", flat=True))
    for pk in sorted(amounts):
        BudgetWindow.objects.filter(pk=pk).update(in_flight=Greatest(F("in_flight") - 1, 0),
                                                  reserved=Greatest(F("reserved") - amounts[pk], Decimal(0)))


def budget_release_stale(*, run_id) -> bool:
    """Give back the hold a run's earlier attempt left recorded (its worker died mid-round):
    called when a recovered run is claimed again and when the reaper fails it. Without this,
    new admissions kept extending the window's ``hold_until`` and the dead round's reservation
    was refused to others ("busy") until the window went quiet for ``BUDGET_HOLD_S``. True
    when there was one."""
    with transaction.atomic():
        recorded = Run.objects.select_for_update().filter(pk=run_id).values_list("budget_hold", flat=True).first()
        if not recorded:
            return False
        Run.objects.filter(pk=run_id).update(budget_hold=[])
        _give_back(recorded_amounts(recorded))
    logger.info("run %s: released the budget hold of an earlier attempt (windows %s)", run_id, recorded)
    return True


# -- records ---------------------------------------------------------------------------------
_LOOK_UP = object()  # usage_record(price=…) not given: look the price up

@retry_transient  # idempotent per message; the transaction is inside
def usage_record(*, run, message, usage: dict | None, hold: Hold | None = None,
                 price: ModelPrice | None | object = _LOOK_UP) -> UsageRecord | None:
    """Store one response's usage (``usage``: the provider's counts, None when it gave none)
    with its cost at today's price (``price``: the run's model's, looked up unless given;
    None: unpriced), count it into the windows of the budgets it falls under
    (:func:`usage_count`), and release the round's hold, in one transaction. Idempotent per
    message (a redelivered turn does not count twice). Returns the record, with ``windows``:
    what :func:`usage_count` returned (None for a record stored before)."""
    counts = usage or {}
    if price is _LOOK_UP:
        price = price_for(provider=run.provider, model=run.model)
    cost = usage_cost(price=price, usage=counts)
    with transaction.atomic():
        record = UsageRecord.objects.filter(message=message).first() if message is not None else None
        give_back = hold.amounts() if hold and hold.window_ids and _hold_taken_back(hold) else {}
        if record is None:
            record = UsageRecord.objects.create(
                run=run, message=message, user_id=run.user_id, workspace_id=run.thread.workspace_id,
                thread_id=run.thread_id, provider=run.provider.slug if run.provider else "", model=run.model,
                input_tokens=counts.get("input_tokens"), output_tokens=counts.get("output_tokens"),
                cached_tokens=counts.get("cached_tokens"), reasoning_tokens=counts.get("reasoning_tokens"),
                cost=cost, currency=price.currency if price and cost is not None else "",
                created_at=timezone.now(),
            )
            record.windows = usage_count(record, give_back=give_back)
        else:
            if give_back:
                _give_back(give_back)
            record.windows = None  # counted when it was stored
    return record


def message_usage(record: UsageRecord | None, usage: dict | None) -> dict:
    """The ``usage`` dict stored on the assistant message: the four token counts (None where
    the provider gave none), ``cost`` (a decimal string, None when unpriced) and ``currency``."""
    counts = usage or {}
    out = {k: counts.get(k) for k in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")}
    cost = record.cost if record is not None else None
    out["cost"] = str(cost) if cost is not None else None
    out["currency"] = record.currency if record is not None and cost is not None else ""
    return out


def budget_warnings(*, user_id, workspace_id, model_id, budgets: list[Budget] | None = None,
                    windows: dict[int, tuple[int, Decimal, bool]] | None = None) -> list[dict]:
    """Budgets whose soft (or hard) limit the current window's spend has reached and that
    have not warned yet in this window: mark them warned and return the warnings
    ``[{"budget_id", "scope", "metric", "period", "spent", "soft_limit", "hard_limit",
    "currency", "resets_at"}]`` (decimals as strings). ``budgets``: as for :func:`budget_admit`."""
    warnings = []
    if budgets is None:
        budgets = budgets_for(user_id=user_id, workspace_id=workspace_id, model_id=model_id)
    plan = [(budget, *window_bounds(budget.period)) for budget in budgets
            if budget.soft_limit is not None or budget.hard_limit is not None]
    if windows is None:
        windows = {w.budget_id: (w.pk, w.spent, w.warned)
                   for w in _windows([(budget, start) for budget, start, _end in plan])}
    for budget, _start, end in plan:
        if budget.pk not in windows:  # the round added nothing to it (unpriced, other currency)
            continue
        window_id, spent, warned = windows[budget.pk]
        threshold = budget.soft_limit if budget.soft_limit is not None else budget.hard_limit
        if spent < threshold or warned:
            continue
        if not BudgetWindow.objects.filter(pk=window_id, warned=False).update(warned=True):
            continue  # warned already (by another run)
        warnings.append(budget_warning_payload(budget, spent, end))
    return warnings


def budget_warning_payload(budget: Budget, spent: Decimal, end: datetime) -> dict:
    return {
        "budget_id": budget.pk,
        "scope": "user" if budget.user_id else "workspace",
        "metric": budget.metric,
        "period": budget.period,
        "spent": _fmt(spent),
        "soft_limit": _fmt(budget.soft_limit) if budget.soft_limit is not None else None,
        "hard_limit": _fmt(budget.hard_limit) if budget.hard_limit is not None else None,
        "currency": budget.currency if budget.metric == Budget.Metric.COST else "",
        "resets_at": end.isoformat(),
    }


# -- tool limits -----------------------------------------------------------------------------


def tool_limit_reason(*, user_id, workspace_id, tool_name: str) -> str | None:
    """Why a call of ``tool_name`` by ``user_id`` is over a per-tool limit (then it goes to
    approval instead of running), or None."""
    from agents.models import ToolCall

    limits = ToolLimit.objects.filter(tool_name=tool_name).filter(
        Q(workspace_id=workspace_id) | Q(workspace__isnull=True))
    for limit in limits:
        start, end = window_bounds(limit.period)
        calls = ToolCall.objects.filter(run__user_id=user_id, tool_name=tool_name, status__in=ToolCall.COUNTED,
                                        created_at__gte=start, created_at__lt=end)
        if limit.workspace_id:
            calls = calls.filter(run__thread__workspace_id=limit.workspace_id)
        made = calls.count()
        if made >= limit.max_calls:
            return (f"{tool_name} was called {made} times {limit.get_period_display()}; the limit is "
                    f"{limit.max_calls}. A person must approve further calls.")
    return None
