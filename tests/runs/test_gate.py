"""The set-up gate (agents/runs/gate.py): a process sets up at most RUN_SETUP_CONCURRENCY
turns at once, first come first served; a turn waits at most RUN_SETUP_WAIT_S; a slot is given
back once, however often it is released. (The driver and the backends' use of it:
tests/runs/test_lifecycle.py.)"""

from __future__ import annotations

import threading

from agents.runs import gate


def _enter_in_thread(order: list[str], name: str, proceed: threading.Event) -> threading.Thread:
    def work():
        with gate.setup_slot() as slot:
            order.append(f"{name}:{'slot' if slot.held else 'no slot'}")
            proceed.wait(10)

    thread = threading.Thread(target=work, name=f"gate-{name}")
    thread.start()
    return thread


def _waiting(count: int) -> bool:
    """True once ``count`` threads wait on the gate (polled: no timing assumptions)."""
    for _ in range(1000):
        if len(gate._semaphore()._cond._waiters) >= count:
            return True
        threading.Event().wait(0.005)
    return False


def test_turns_past_the_limit_wait_and_start_in_the_order_they_came(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 1, 30
    order: list[str] = []
    release_first = threading.Event()
    release_rest = threading.Event()
    first = _enter_in_thread(order, "first", release_first)
    assert _poll(lambda: order == ["first:slot"])
    second = _enter_in_thread(order, "second", release_rest)
    assert _waiting(1)
    third = _enter_in_thread(order, "third", release_rest)
    assert _waiting(2)
    assert order == ["first:slot"]  # the other two wait while the first sets up
    release_first.set()
    first.join(10)
    assert _poll(lambda: len(order) == 2)
    assert order == ["first:slot", "second:slot"]  # first come, first served; the third still waits
    release_rest.set()
    second.join(10)
    third.join(10)
    assert order == ["first:slot", "second:slot", "third:slot"]


def test_a_turn_that_waited_too_long_goes_ahead_without_a_slot(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 1, 0.05
    with gate.setup_slot() as held:
        assert held.held
        with gate.setup_slot() as late:  # the slot is taken: waits RUN_SETUP_WAIT_S, then goes on
            assert not late.held
    with gate.setup_slot() as again:  # both gave back what they had: the slot is free again
        assert again.held


def test_a_slot_released_early_and_again_at_the_end_is_given_back_once(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 2, 0.05
    with gate.setup_slot() as slot:
        slot.release()  # the backend's dispatched()
        slot.release()  # a second call changes nothing
    semaphore = gate._semaphore()
    assert semaphore.acquire(blocking=False) and semaphore.acquire(blocking=False)
    assert not semaphore.acquire(blocking=False)  # exactly two slots, not three
    semaphore.release()
    semaphore.release()


def test_a_limit_of_zero_turns_the_gate_off(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 0, 30
    with gate.setup_slot() as first, gate.setup_slot() as second:  # nobody waits
        assert not first.held and not second.held


def _poll(predicate) -> bool:
    for _ in range(1000):
        if predicate():
            return True
        threading.Event().wait(0.005)
    return False
