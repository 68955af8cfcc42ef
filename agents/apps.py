import importlib

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        # Fill the tool registry once: every installed app's ``tools`` module declares its
        # tools with ``@tool``, plus any ``EXTRA_TOOL_MODULES``. Read-only afterwards.
        from django.conf import settings
        from django.db.models.signals import post_migrate
        from django.utils.module_loading import autodiscover_modules

        from agents.tools import registry

        autodiscover_modules("tools")
        importlib.import_module("agents.builtin_tools")
        for module in settings.EXTRA_TOOL_MODULES:
            importlib.import_module(module)
        registry.freeze()
        from agents import agent_runs
        from agents.backends import register_default_backend
        from agents.backends.model import ModelBackend
        from agents.runs.driver import run_turn_or_fail
        from agents.runs.executors import set_turn_runner

        register_default_backend(ModelBackend)  # the platform's own tool loop
        agent_runs.register()  # the backend for provider kind agent_runs
        set_turn_runner(run_turn_or_fail)  # what the embedded pool runs (the Celery task names it too)
        post_migrate.connect(_sync_tool_policies, sender=self)
        post_migrate.connect(_install_config_triggers, sender=self)

        # Each Celery worker watches for runs whose worker died (expired lease).
        from celery.signals import worker_ready

        from agents.runs.reaper import start_reaper

        worker_ready.connect(start_reaper, weak=False)
        worker_ready.connect(_preload_in_background, weak=False)


def _sync_tool_policies(sender, **kwargs) -> None:
    """After migrate (and after a test database flush): the default roles, then a ToolPolicy
    row with safe defaults — including default roles — for every registered tool."""
    from agents.models import Role
    from agents.pipeline import tool_policies_sync
    from agents.roles import ensure_default_roles

    ensure_default_roles(Role)
    tool_policies_sync()


def _preload_in_background(**_signal_kwargs) -> None:
    """worker_ready runs on the consumer's thread: beside it, say which enabled providers this
    worker has no key for, and import the SDKs."""
    import threading

    from agents.provider_keys import warn_unconfigured_providers
    from llm.capabilities import preload_adapters

    def preload() -> None:
        warn_unconfigured_providers()
        preload_adapters()

    threading.Thread(target=preload, name="preload-adapters", daemon=True).start()


def _install_config_triggers(sender, using="default", **kwargs) -> None:
    """After migrate: the configuration generation's triggers on every governed table
    (``chatplatform.config_cache``) — a migration that rebuilt a table on SQLite dropped its own."""
    from django.db import connections

    from chatplatform.config_cache import install_triggers

    install_triggers(connections[using])
