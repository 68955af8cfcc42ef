"""``manage.py mcp_refresh [slug …]``: connect to MCP servers, list their tools and store
them (the admin's "connect and list tools" from the command line)."""

from django.core.management.base import BaseCommand, CommandError

from mcp_client import sync
from mcp_client.models import MCPServer


class Command(BaseCommand):
    help = "Connect to MCP servers (all, or the given slugs), list their tools and record health."

    def add_arguments(self, parser):
        parser.add_argument("slugs", nargs="*")

    def handle(self, *args, slugs, **options):
        servers = MCPServer.objects.all()
        if slugs:
            servers = servers.filter(slug__in=slugs)
            missing = set(slugs) - set(servers.values_list("slug", flat=True))
            if missing:
                raise CommandError(f"no MCP server {', '.join(sorted(missing))}")
        failed = 0
        try:
            for server in servers:
                report = sync.refresh(server)
                state = "enabled" if server.enabled else "disabled"
                self.stdout.write(f"{server.slug} ({state}): {report.health}")
                failed += not report.health.startswith("connected")
                for tool in report.tools:
                    policy = tool.policy
                    offered = tool.exposed_name or "-"
                    flags = [policy.risk if policy else "", "enabled" if policy and policy.enabled else "off"]
                    if tool.quarantined:
                        flags.append("QUARANTINED")
                    self.stdout.write(f"  {tool.name} → {offered} [{', '.join(f for f in flags if f)}]")
        finally:
            sync.reset()
        if failed:
            raise CommandError(f"{failed} server(s) not connected")
