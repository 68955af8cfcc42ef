"""The knowledge base's live feed: ``knowledge.changed`` per workspace.

Every committed write (create, edit, delete, save from chat, import, a model's
``save_to_knowledge``) is announced to the Channels group ``knowledge.<workspace_id>`` as
``{"type": "knowledge.changed", "item_ids": [str], "workspace_id": int}``; the knowledge
pages follow it over ``GET /knowledge/events/`` (server-sent events, see ``views.py``) and
refresh. Runs still emit their own ``knowledge.changed`` run event on the thread group
(DESIGN §7); this feed is what pages that are not a thread listen to.

Publishing is best-effort: it happens after commit, reuses the process's publisher loop and
channel-layer connection (``agents.events``), and a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

logger = logging.getLogger(__name__)

GROUP_MESSAGE_TYPE = "knowledge.event"
PUBLISH_TIMEOUT_S = 2.0


def knowledge_group(workspace_id) -> str:
    return f"knowledge.{int(workspace_id)}"


def knowledge_changed_publish(*, workspace_id: int, item_ids: Iterable) -> None:
    """Announce changed items of ``workspace_id`` once the current transaction commits."""
    event = {"type": "knowledge.changed", "item_ids": [str(i) for i in item_ids], "workspace_id": int(workspace_id)}
    transaction.on_commit(lambda: _send(event))


def _send(event: dict) -> None:
    try:
        from channels.layers import get_channel_layer

        from chatplatform.loops import run_coroutine

        layer = get_channel_layer()
        if layer is None:
            return
        message = {"type": GROUP_MESSAGE_TYPE, "event": event}
        run_coroutine(layer.group_send(knowledge_group(event["workspace_id"]), message), timeout=PUBLISH_TIMEOUT_S)
    except Exception:  # the feed is a convenience; a write never fails because of it
        logger.warning("knowledge.changed not published for workspace %s", event.get("workspace_id"), exc_info=True)
