"""Celery tasks. Thin: fetch by id, skip runs that are finished or wait for a person, call
the driver.

``acks_late`` is safe because ``run_turn`` is idempotent: the ToolCall ledger says what
already ran, so a redelivered task continues instead of repeating side effects.
"""

from celery import shared_task

from agents.models import Run
from agents.runs.driver import run_turn
from agents.runs.executors import RUN_TURN_TASK


@shared_task(name=RUN_TURN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn_task(run_id: str) -> None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None or status in Run.TERMINAL or status == Run.Status.AWAITING_APPROVAL:
        return
    run_turn(run_id=run_id)  # claims the run's lease; a run another live worker holds is skipped
