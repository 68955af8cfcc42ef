"""The set-up gate (agents/runs/gate.py): a process sets up at most RUN_SETUP_CONCURRENCY
turns at once, strictly first come first served; a slot held for RUN_SETUP_WAIT_S stops
counting and the next turn in line takes its place; a slot is given back once, however often it
is released. (The driver and the backends' use of it: tests/runs/test_lifecycle.py.)"""

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


def test_a_slot_held_too_long_stops_counting_and_its_late_release_frees_nothing():
    process_gate = gate.FifoGate(1, hold_s=0.05)
    stuck = process_gate.acquire()
    threading.Event().wait(0.06)  # past the stuck holder's deadline
    after = process_gate.acquire()  # not blocked: the stuck slot no longer counts
    assert process_gate.holding == 1
    process_gate.release(stuck)  # too late: it is no longer a holder
    assert process_gate.holding == 1  # the second turn still holds its slot
    process_gate.release(after)
    assert process_gate.holding == 0


def test_a_stuck_holder_lets_the_queue_through_one_at_a_time_in_order():
    """Bounded per holder, not per waiter: when the holder is stuck, the turns in line go
    ahead one by one as each slot expires, never all at once (a stampede of set-ups)."""
    process_gate = gate.FifoGate(1, hold_s=0.05)
    process_gate.acquire()  # stuck: never released
    entered: list[tuple[str, int]] = []

    def wait_in_line(name: str) -> None:
        process_gate.acquire()  # holds it for good, too
        entered.append((name, process_gate.holding))

    threads = []
    for i, name in enumerate(("first", "second", "third")):
        threads.append(threading.Thread(target=wait_in_line, args=(name,)))
        threads[-1].start()
        assert _poll(lambda i=i: process_gate.waiting + len(entered) == i + 1)
    for thread in threads:
        thread.join(10)
    assert [name for name, _ in entered] == ["first", "second", "third"]
    assert all(holding == 1 for _, holding in entered)  # each entered alone: the slot count held


def test_a_slot_released_early_and_again_at_the_end_is_given_back_once(settings):
    settings.RUN_SETUP_CONCURRENCY, settings.RUN_SETUP_WAIT_S = 2, 30
    with gate.setup_slot() as slot:
        slot.release()  # the backend's dispatched()
        assert not slot.held
        slot.release()  # a second call changes nothing
    process_gate = gate.process_gate()
    assert process_gate.holding == 0
    first, second = process_gate.acquire(), process_gate.acquire()
    assert process_gate.holding == 2 and process_gate.waiting == 0  # exactly two slots
    process_gate.release(first)
    process_gate.release(first)  # a token gives back one slot only
    assert process_gate.holding == 1
    process_gate.release(second)


def test_a_released_slot_goes_to_the_turn_that_waited_not_to_one_arriving_meanwhile(settings):
    """The burst's first runs must be set up first: a slot given back while a turn waits is
    that turn's, even if another thread asks for one before the waiter runs again (a
    ``threading.Semaphore`` lets the newcomer take it)."""
    process_gate = gate.FifoGate(1, hold_s=30)
    holder = process_gate.acquire()
    got = []
    waiter = threading.Thread(target=lambda: got.append(process_gate.acquire()))
    waiter.start()
    assert _poll(lambda: process_gate.waiting == 1)
    process_gate.release(holder)  # handed to the waiter, which may not have run yet:
    assert process_gate.holding == 1 and process_gate.waiting == 0  # the slot is never free between
    newcomer = []
    late = threading.Thread(target=lambda: newcomer.append(process_gate.acquire()))
    late.start()
    waiter.join(10)
    assert len(got) == 1 and not newcomer  # the waiter has it; the newcomer queues behind
    assert _poll(lambda: process_gate.waiting == 1)
    process_gate.release(got[0])
    late.join(10)
    assert len(newcomer) == 1
    process_gate.release(newcomer[0])
    assert process_gate.holding == 0


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
