"""Celery tasks. Thin: fetch by id, skip runs that are finished or wait for a person, call
the driver.

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

from agents.models import Run
from agents.runs.driver import run_turn
from agents.runs.executors import RUN_TURN_TASK


@shared_task(name=RUN_TURN_TASK, acks_late=False, ignore_result=True)
def run_turn_task(run_id: str) -> None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None or status in Run.TERMINAL or status == Run.Status.AWAITING_APPROVAL:
        return
    run_turn(run_id=run_id)  # claims the run's lease; a run another live worker holds is skipped
