"""Risk classification of one tool call: tool risk × environment tier × permission.

Rules (DESIGN §5; ss-tools row of §1):

* environment: the tool's own (an MCP server bound to an environment) > send-time ``env_id``
  > UI context ``envId`` > none — never the model's: a tool argument ``env_id`` is the run's
  (``agents.tools.scope``); a name that is an ``Environment`` row takes its tier, otherwise names containing
  ``prod`` → prod, ``stag``/``test`` → staging, ``dev``/``local`` → dev;
* permission failure short-circuits to ``permission.denied`` — never an approval;
* read → ``safe``; write → ``guarded`` (approval per the policy's mode); dangerous →
  ``dangerous``, always approval, with a 10 s countdown the server enforces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .models import Environment

COUNTDOWN_S = 10  # dangerous calls: approve is refused until 10 s after the request


def env_tier(name: str | None) -> str | None:
    """``"prod" | "staging" | "dev" | None`` for an environment name."""
    if not name:
        return None
    row = Environment.objects.filter(name=name).only("tier").first()
    if row is not None:
        return row.tier
    lowered = name.lower()
    if "prod" in lowered:
        return "prod"
    if "stag" in lowered or "test" in lowered:
        return "staging"
    if "dev" in lowered or "local" in lowered:
        return "dev"
    return None


def resolve_env(*, send_env_id: str = "", ui_context: dict | None = None) -> str:
    """The run's environment name: the send's ``env_id``, else the UI context's ``envId``
    (may be ""). Model output never takes part."""
    for candidate in (send_env_id, (ui_context or {}).get("envId")):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return ""


@dataclass(frozen=True)
class RiskAssessment:
    risk: str
    risk_level: str  # safe | guarded | dangerous
    env_context: str | None  # prod | staging | dev | None
    dangerous: bool
    permission_granted: bool
    required_role: str
    alternatives: tuple[str, ...]
    needs_approval: bool
    countdown_s: int

    def as_dict(self) -> dict:
        data = asdict(self)
        data["alternatives"] = list(self.alternatives)
        return data


def risk_classify(
    *,
    risk: str,
    approval_mode: str,
    env_name: str,
    permission_granted: bool,
    required_role: str = "",
    alternatives: tuple[str, ...] = (),
) -> RiskAssessment:
    """Classify one call. ``risk``: the policy's ``read|write|dangerous``; ``approval_mode``:
    ``never|writes_in_prod|always``; ``env_name``: from :func:`resolve_env`."""
    return risk_assess(risk=risk, approval_mode=approval_mode, tier=env_tier(env_name),
                       permission_granted=permission_granted, required_role=required_role, alternatives=alternatives)


def risk_assess(
    *,
    risk: str,
    approval_mode: str,
    tier: str | None,
    permission_granted: bool,
    required_role: str = "",
    alternatives: tuple[str, ...] = (),
) -> RiskAssessment:
    """:func:`risk_classify` once the tier is known — a pure function, shared by the live path
    and policy simulation (which replays a call's recorded tier). ``tier``: ``prod|staging|dev``
    or None."""
    if not permission_granted:
        return RiskAssessment(risk, "dangerous" if risk == "dangerous" else ("guarded" if risk == "write" else "safe"),
                              tier, risk == "dangerous", False, required_role, alternatives, False, 0)
    if risk == "dangerous":
        return RiskAssessment(risk, "dangerous", tier, True, True, "", (), True, COUNTDOWN_S)
    if risk == "write":
        needs = approval_mode == "always" or (approval_mode == "writes_in_prod" and tier == "prod")
        return RiskAssessment(risk, "guarded", tier, False, True, "", (), needs, 0)
    needs = approval_mode == "always"
    return RiskAssessment(risk, "safe", tier, False, True, "", (), needs, 0)
