"""Celery tasks. Thin: call the driver (whose claim skips
runs that are finished or wait for a person).

The broker message only wakes a worker up; the run's row is what is durable. So the task is
acknowledged when it starts (no ``acks_late``): a worker that dies mid-turn stops renewing the
run's lease and the reaper re-queues the run (``agents.runs.reaper``), a message lost before
any worker claimed the run is enqueued again after ``RUN_QUEUED_DEADLINE_S``. Holding the
message unacknowledged for the minutes a turn lasts would add nothing but kombu's "restore
unacked messages" path on a broker reconnect, which crashed workers holding a run when Redis
restarted (``AttributeError: 'NoneType' object has no attribute 'hostname'``, celery/kombu
5.7). ``run_turn`` is idempotent anyway: the ToolCall ledger says what already ran.
"""

from celery import shared_task
from django.db import close_old_connections

from agents.runs.driver import run_turn_or_fail
from agents.runs.executors import RUN_TURN_TASK


@shared_task(name=RUN_TURN_TASK, acks_late=False, ignore_result=True)
def run_turn_task(run_id: str) -> None:
    close_old_connections()
    try:
        # The claim skips runs that ended, wait for a person, or another live worker holds;
        # no database connection within DB_POOL_TIMEOUT_S fails the run visibly.
        run_turn_or_fail(run_id=run_id)
    finally:
        close_old_connections()  # hand the connection back to the pool
