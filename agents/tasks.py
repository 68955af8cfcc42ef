"""Celery tasks. Thin: call the driver (whose claim skips
runs that are finished or wait for a person).

``acks_late`` is safe because ``run_turn`` is idempotent: the ToolCall ledger says what
already ran, so a redelivered task continues instead of repeating side effects.
"""

from celery import shared_task
from django.db import close_old_connections

from agents.runs.driver import run_turn_or_fail
from agents.runs.executors import RUN_TURN_TASK


@shared_task(name=RUN_TURN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn_task(run_id: str) -> None:
    close_old_connections()
    try:
        # The claim skips runs that ended, wait for a person, or another live worker holds;
        # no database connection within DB_POOL_TIMEOUT_S fails the run visibly.
        run_turn_or_fail(run_id=run_id)
    finally:
        close_old_connections()  # hand the connection back to the pool
