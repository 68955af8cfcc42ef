"""The agent loop: ``run_turn(run_id=…)`` (DESIGN §5)."""

from .turn import run_turn

__all__ = ["run_turn"]
