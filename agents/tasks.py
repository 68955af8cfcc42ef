"""Celery tasks. Thin: fetch by id, skip terminal runs, call the loop.

``acks_late`` is safe because ``run_turn`` is idempotent: the ToolCall ledger says what
already ran, so a redelivered task continues instead of repeating side effects.
"""

from celery import shared_task
from celery.signals import worker_ready

from agents.loop import run_turn
from agents.models import Run


@shared_task(name="agents.run_turn", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn_task(run_id: str) -> None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None or status in Run.TERMINAL or status == Run.Status.AWAITING_APPROVAL:
        return
    run_turn(run_id=run_id)  # claims the run's lease; a run another live worker holds is skipped


@worker_ready.connect
def _start_reaper(**kwargs) -> None:
    """Each worker watches for runs whose worker died (expired lease) and re-queues them."""
    from agents.reaper import start_reaper

    start_reaper()
