"""Who may make the platform run a command or read its environment through an MCP server.

Two parts of an ``MCPServer`` act with the platform's own powers: a stdio server's
``command``/``args``/``env`` (a process started as the platform's user) and ``${VAR}`` in any
setting (expanded from the platform's process environment). Only an active superuser may set
them. The mechanism:

* :func:`privileged_material` — those parts of a server, canonical (a stdio server's command,
  args and env; every url/header value that contains ``${…}``). ``{}`` when there are none.
* :func:`sign` stores an HMAC of that material (keyed by ``SECRET_KEY``) in
  ``MCPServer.privileged_signature``; only :func:`authorize` (with a superuser) and the
  platform's own seeding code call it.
* :func:`check_change` (the model's ``clean()``) refuses a change of the material by anyone
  else, and :func:`require_signed` (run before every connection, ``mcp_client.sync``)
  refuses to start a command or expand a variable whose material is not signed — so rows
  written by any other path (admin actions, fixtures, the shell, SQL) never run.

``${VAR}`` names a variable of the platform's environment only when it is in
``settings.MCP_ENV_ALLOWLIST`` (empty by default) AND not one of the platform's own
(:func:`variable_refusal`): the platform's documented variables (``PLATFORM_VARIABLES``),
names with a platform prefix (``PLATFORM_PREFIXES``: provider keys, OIDC, Django, Celery,
MCP…), and the name of any Django setting — even when listed.
"""

from __future__ import annotations

import json
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.crypto import constant_time_compare, salted_hmac

VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SALT = "mcp_client.trust.privileged"

# The platform's own variables (settings and secrets it reads from its environment).
PLATFORM_VARIABLES = frozenset({
    "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "FIELD_ENCRYPTION_KEY", "DEMO_PASSWORD",
    "METRICS_TOKEN", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
    "RUN_EXECUTOR", "WORKER_METRICS_ADDR", "LOG_LEVEL", "LOG_FORMAT", "COMPAT_API_DEFAULT_MODEL",
    "DB_POOL_MAX_SIZE", "DB_POOL_TIMEOUT_S", "EXTRA_TOOL_MODULES", "PASSWORD_LOGIN_ENABLED",
    "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER", "REDIS_DB", "REDIS_PASSWORD", "REDIS_SENTINEL_PASSWORD",
})
# Prefixes of the platform's variable families: model providers (their *_API_KEY, base URLs),
# single sign-on, Django/Celery, the MCP client's own settings, telemetry, PostgreSQL clients.
PLATFORM_PREFIXES = ("OPENAI_", "ANTHROPIC_", "HERMES_", "OLLAMA_", "OIDC_", "DJANGO_", "CELERY_", "MCP_",
                     "OTEL_", "PG", "POSTGRES")


class NotAllowed(ValidationError):
    """A change or a connection needs a superuser's signature it does not have (code
    ``privileged``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="privileged")


def is_superuser(user) -> bool:
    return bool(user is not None and getattr(user, "is_active", False) and getattr(user, "is_superuser", False))


def variable_refusal(name: str) -> str:
    """Why ``${name}`` may not be expanded ("" when it may)."""
    allow = {str(n) for n in (getattr(settings, "MCP_ENV_ALLOWLIST", None) or [])}
    if name in PLATFORM_VARIABLES or name.startswith(PLATFORM_PREFIXES) or hasattr(settings, name):
        return f"${{{name}}} is one of the platform's own settings and is never passed to an MCP server"
    if name not in allow:
        return f"${{{name}}} is not in MCP_ENV_ALLOWLIST"
    return ""


def variables(server) -> list[str]:
    """The ``${VAR}`` names used anywhere in ``server``'s settings."""
    found: list[str] = []
    for value in _strings(server):
        found.extend(VAR.findall(value))
    return sorted(set(found))


def _strings(server):
    yield str(server.command or "")
    yield from (str(a) for a in (server.args or []))
    yield from (str(v) for v in (server.env or {}).values())
    yield str(server.url or "")
    yield from (str(v) for v in (server.headers or {}).values())


def privileged_material(server) -> dict:
    """The settings only a superuser may set, canonical; ``{}`` when there are none."""
    material: dict = {}
    if server.transport == "stdio":
        material["stdio"] = {"command": str(server.command or ""), "args": [str(a) for a in (server.args or [])],
                             "env": {str(k): str(v) for k, v in (server.env or {}).items()}}
    expansions = []
    if server.url and VAR.search(str(server.url)):
        expansions.append(["url", "", str(server.url)])
    for key, value in sorted((server.headers or {}).items()):
        if VAR.search(str(value)):
            expansions.append(["header", str(key), str(value)])
    if expansions:
        material["expansions"] = expansions
    return material


def _digest(material: dict) -> str:
    canonical = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return salted_hmac(_SALT, canonical, algorithm="sha256").hexdigest()


def is_signed(server) -> bool:
    material = privileged_material(server)
    if not material:
        return True
    return bool(server.privileged_signature) and constant_time_compare(server.privileged_signature,
                                                                        _digest(material))


def sign(server) -> None:
    """Mark the server's current privileged settings as set by a superuser (not saved here)."""
    material = privileged_material(server)
    server.privileged_signature = _digest(material) if material else ""


def describe(material: dict) -> str:
    parts = []
    if "stdio" in material:
        parts.append("a stdio server's command, args or env")
    if "expansions" in material:
        parts.append("${VAR} expansion")
    return " and ".join(parts) or "nothing privileged"


def refusal_message(server) -> str:
    return (f"Only a superuser may set {describe(privileged_material(server))} (it runs a command or reads "
            "the platform's environment).")


def check_change(server, actor=None) -> None:
    """Refuse (``NotAllowed``) a save by ``actor`` that sets privileged settings unless the
    actor is a superuser or the settings are unchanged from what a superuser signed; a
    superuser's change is signed here. ``actor`` None: no one vouches (fixtures, scripts)."""
    if is_superuser(actor):
        own = set(server.env or {}) if server.transport == "stdio" else set()
        for name in variables(server):
            if name in own:  # the server's own env entries, named in its args
                continue
            reason = variable_refusal(name)
            if reason:
                raise NotAllowed(reason + ".")
        sign(server)
        return
    if not is_signed(server):
        raise NotAllowed(refusal_message(server))


def require_signed(server) -> None:
    """Before connecting: refuse a server whose privileged settings no superuser signed."""
    if not is_signed(server):
        raise NotAllowed(f"{describe(privileged_material(server))} was not set by a superuser; "
                         "a superuser must review and save this server")


def changed_fields(old, new) -> list[str]:
    fields = ["slug", "name", "enabled", "transport", "command", "args", "env", "url", "headers", "allowlist",
              "environment_id", "connect_timeout_s", "call_timeout_s", "secret_headers_encrypted"]
    if old is None:
        return fields
    return [f for f in fields if getattr(old, f) != getattr(new, f)]
