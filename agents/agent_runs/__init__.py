"""Remote agents as chat targets (provider kind ``agent_runs``): the Hermes agent gateway's
Runs API. :mod:`.client` speaks the wire format, :mod:`.backend` maps a remote run onto a
platform run (events, ledger, approvals, stop, re-attach), :mod:`.health` probes the agent
for the provider catalogue. ``register()`` is called once from ``AgentsConfig.ready``."""

from __future__ import annotations


def register() -> None:
    from agents.backends import register_backend

    from .backend import AgentRunsBackend

    register_backend("agent_runs", AgentRunsBackend)
