"""Health of an agent provider for the catalogue (``models_refresh``, the admin's "Refresh
models and health", ``manage.py providers_refresh``): ``GET /health`` must answer
``{"status": "ok"}`` and ``GET /v1/capabilities`` (with the key) must offer run submission,
run events and run approvals. Returns a status line like every provider's: "ok",
"unreachable: …", "error: …"."""

from __future__ import annotations

from llm.agent_runs import AgentRunsError

REQUIRED_FEATURES = ("run_submission", "run_events_sse", "run_approval_response", "run_stop")


def agent_probe(provider, *, timeout_s: float) -> str:
    from .backend import client_for

    client = client_for(provider, connect_s=timeout_s, read_s=timeout_s)
    try:
        health = client.health()
        if health.get("status") != "ok":
            return f"error: the agent's /health says {str(health.get('status'))[:80]!r}"
        capabilities = client.capabilities()
    except AgentRunsError as exc:
        if exc.code in ("unreachable", "timeout"):
            return f"unreachable: {exc.message}"[:300]
        if exc.code == "auth":
            return f"error: invalid API key ({exc.message})"[:300]
        return f"error: {exc.message}"[:300]
    features = capabilities.get("features") or {}
    missing = [name for name in REQUIRED_FEATURES if not features.get(name)]
    if missing:
        return f"error: the agent does not offer {', '.join(missing)}"
    return "ok"
