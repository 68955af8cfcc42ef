"""ASGI entry point: HTTP (Django, DRF, admin, SSE; ``/mcp/`` the knowledge MCP server) and
websockets (``/ws/threads/<id>/``).

Websocket auth: the session cookie (browsers) or an ``Authorization: Token <key>`` header
(API clients). Origin check: a request that carries an ``Origin`` header must come from an
allowed host; one without it (non-browser clients) may only authenticate by token, so a
cross-site page can never ride a user's session cookie.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.routing import websocket_urlpatterns  # noqa: E402
from chat.ws_auth import WebsocketAuthStack  # noqa: E402
from chatplatform.ws_limits import close_cleanly_on_violations  # noqa: E402
from knowledge.mcp_server import with_mcp_endpoint  # noqa: E402

from .loop_binding import BindServerLoop  # noqa: E402

close_cleanly_on_violations()  # frames over daphne's 1 MiB limit: close 1009, not a dropped TCP connection

application = BindServerLoop(
    ProtocolTypeRouter(
        {
            "http": with_mcp_endpoint(django_asgi_app),  # /mcp/: the knowledge base as an MCP server
            "websocket": WebsocketAuthStack(URLRouter(websocket_urlpatterns)),
        }
    )
)

from chatplatform.heap import freeze_startup_heap  # noqa: E402

from .warmup import warm_web_process  # noqa: E402

warm_web_process()  # the URLconf and the Celery publisher: not on the first requests' threads
freeze_startup_heap()  # what the application imported: out of every later full collection

from knowledge.embedding_jobs import embedding_serve_in_this_process  # noqa: E402

# This process runs embedding jobs (embedded mode) and, a few seconds after start-up, starts
# those its workspaces are behind on (a new model configured, the demo just seeded). The model
# itself loads only when a job or a search first needs it.
embedding_serve_in_this_process()
