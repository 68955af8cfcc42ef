"""The set-up gate (agents/runs/gate.py): a process sets up at most RUN_SETUP_CONCURRENCY
turns at once, first come first served; a turn waits at most RUN_SETUP_WAIT_S; a slot is given
back once, however often it is released. (The driver and the backends' use of it:
tests/runs/test_lifecycle.py.)"""

from __future__ import annotations

import threading

import pytest

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
        if gate.process_gate().waiting >= count:
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
    process_gate = gate.process_gate()
    assert process_gate.acquire(timeout=0) and process_gate.acquire(timeout=0)
    assert not process_gate.acquire(timeout=0)  # exactly two slots, not three
    process_gate.release()
    process_gate.release()
    with pytest.raises(ValueError):  # a third give-back would make a slot out of nothing
        process_gate.release()


def test_a_released_slot_goes_to_the_turn_that_waited_not_to_one_arriving_meanwhile(settings):
    """The burst's first runs must be set up first: a slot given back while a turn waits is
    that turn's, even if another thread asks for one before the waiter runs again (a
    ``threading.Semaphore`` lets the newcomer take it)."""
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 1, 30
    process_gate = gate.process_gate()
    assert process_gate.acquire(timeout=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(process_gate.acquire(timeout=30)))
    waiter.start()
    assert _waiting(1)
    process_gate.release()  # handed to the waiter, which may not have run yet
    assert not process_gate.acquire(timeout=0)  # the newcomer queues behind: no slot for it
    waiter.join(10)
    assert got == [True]
    process_gate.release()
    assert process_gate.acquire(timeout=0)  # free again once the waiter gave it back
    process_gate.release()


def test_a_turn_that_times_out_leaves_the_queue(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 1, 30
    process_gate = gate.process_gate()
    assert process_gate.acquire(timeout=0)
    assert not process_gate.acquire(timeout=0.01)  # waited, gave up
    assert process_gate.waiting == 0
    process_gate.release()  # nobody waits: the slot is free, not handed to the one that left
    assert process_gate.acquire(timeout=0)
    process_gate.release()


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
