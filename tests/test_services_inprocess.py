"""Production-mode plumbing inside the test process: PostgreSQL + the Redis channel layer.

A turn published by a worker thread through channels-redis reaches a group subscriber, with
the same events and text as in embedded mode. (The Celery worker path is covered by
``tests/e2e/test_services.py``.)
"""

import pytest
from django.conf import settings
from django.db import connection

from agents.models import Run
from chat.models import Message
from knowledge.services import knowledge_item_create
from tests.conftest import joined_text, make_thread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_turn_over_redis_channel_layer_and_postgres(users, workspaces, offline, converse):
    assert connection.vendor == "postgresql"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "chatplatform.layers.RedisPubSubLayer"
    knowledge_item_create(workspace=workspaces["demo"], owner=users["admin"], title="The with statement",
                          content="The with statement wraps a block with a context manager.")
    thread = make_thread(users["alice"], workspaces["demo"], offline)
    run, events = converse(thread, users["alice"], "How does the with statement work?")
    assert run.status == Run.Status.COMPLETED
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    final = Message.objects.filter(thread=thread, role="assistant").order_by("-position").first()
    assert final.content == joined_text(events)
    assert "context manager" in final.content
