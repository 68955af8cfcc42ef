from django.apps import AppConfig


class AgentsMcpConfig(AppConfig):
    name = "mcp_client"
    label = "agents_mcp"
    verbose_name = "MCP servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from agents.models import ToolPolicy
        from agents.tools import tool_sources

        from . import sync
        from .models import MCPServer, MCPTool

        tool_sources.add(sync.mcp_tools)
        tool_sources.add(sync.mcp_resources)
        # Each Celery worker connects its enabled servers when ready; the web process does so
        # on its first request (knowledge.mcp_server.with_mcp_endpoint).
        from celery.signals import worker_ready

        worker_ready.connect(sync.warm_up_in_background, weak=False, dispatch_uid="mcp-warm-up")
        import atexit

        atexit.register(sync.runtime.shutdown, 3.0)
        post_delete.connect(sync.delete_policy_with_tool, sender=MCPTool, weak=False, dispatch_uid="mcp-tool-policy")
        for model in (MCPServer, MCPTool, ToolPolicy):
            post_save.connect(sync.mark_stale, sender=model, weak=False, dispatch_uid=f"mcp-stale-save-{model.__name__}")
            post_delete.connect(sync.mark_stale, sender=model, weak=False, dispatch_uid=f"mcp-stale-del-{model.__name__}")
