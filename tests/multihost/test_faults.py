"""smoke"""
import pytest
from tests.e2e import flows

pytestmark = [pytest.mark.services, pytest.mark.multihost]


def test_a_chat_through_lb(cluster):
    token = flows.login_token(cluster, "alice")
    thread_id = flows.create_thread(cluster, token, provider="openai")
    with flows.ws_connect(cluster, thread_id, token=token) as ws:
        turn = flows.ws_turn(ws, "hello")
    assert turn.events[-1]["type"] == "run.completed"
