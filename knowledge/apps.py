from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge"

    def ready(self) -> None:
        # Plug into the agents app through its declared plug-in points: the knowledge tools
        # (``knowledge/tools.py``, found by the tool registry's autodiscovery) and grounding.
        from agents.grounding import register_grounding

        from .grounding import grounding_for_run
        from .jobs import set_upload_processor
        from .uploads import knowledge_upload_process

        register_grounding(grounding_for_run)
        set_upload_processor(knowledge_upload_process)  # what the embedded import pool runs
