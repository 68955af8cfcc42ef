from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge"

    def ready(self) -> None:
        # Plug into the agents app through its declared plug-in points: the knowledge tools
        # (``knowledge/tools.py``, found by the tool registry's autodiscovery) and grounding.
        from django.core import checks
        from django.db import connections
        from django.db.backends.signals import connection_created

        from agents.grounding import register_grounding

        from .grounding import grounding_for_run
        from .jobs import set_upload_processor
        from .uploads import knowledge_upload_process
        from .vectors import load_sqlite_vec

        register_grounding(grounding_for_run)
        checks.register(check_embedding_settings, "knowledge")
        # sqlite-vec into every SQLite connection (vector search, knowledge/vectors.py),
        # including one opened before this ran.
        connection_created.connect(load_sqlite_vec, dispatch_uid="knowledge.load_sqlite_vec")
        for alias in connections:
            conn = connections[alias]
            if conn.vendor == "sqlite" and conn.connection is not None:
                load_sqlite_vec(sender=None, connection=conn)
        set_upload_processor(knowledge_upload_process)  # what the embedded import pool runs


def check_embedding_settings(app_configs=None, **kwargs):
    """``manage.py check`` (and every command's start): a bad ``KNOWLEDGE_EMBEDDINGS`` or
    ``KNOWLEDGE_EMBEDDING_PROCESS`` is an error at start-up, not at the first saved item."""
    from django.conf import settings
    from django.core import checks

    from .embeddings import current_spec

    try:
        current_spec()
    except ValueError as exc:
        return [checks.Error(str(exc), id="knowledge.E001")]
    process = (settings.KNOWLEDGE_EMBEDDING_PROCESS or "child").strip().lower()
    if process not in ("child", "inline"):
        return [checks.Error(f"KNOWLEDGE_EMBEDDING_PROCESS must be child or inline, not {process!r}",
                             id="knowledge.E002")]
    return []
