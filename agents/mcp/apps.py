from django.apps import AppConfig


class AgentsMcpConfig(AppConfig):
    name = "agents.mcp"
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
        for model in (MCPServer, MCPTool, ToolPolicy):
            post_save.connect(sync.mark_stale, sender=model, weak=False, dispatch_uid=f"mcp-stale-save-{model.__name__}")
            post_delete.connect(sync.mark_stale, sender=model, weak=False, dispatch_uid=f"mcp-stale-del-{model.__name__}")
