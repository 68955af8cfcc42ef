"""End-to-end, services mode: daphne + PostgreSQL + Redis channel layer + a Celery worker.

The same conversation as the embedded test, but the turn runs on the Celery worker (thread
pool) and its events reach the websocket through the Redis channel layer. Skipped when
PostgreSQL or Redis is unreachable, unless ``CI=true`` (then it fails).
"""

from __future__ import annotations

import time

import pytest

from . import flows
from .flows import QUESTION, WITH_TOPIC_TITLE

pytestmark = pytest.mark.services

TASK = "agents.run_turn"


@pytest.fixture(scope="module")
def alice(services_platform) -> str:
    return flows.login_token(services_platform, "alice")


def test_services_providers(services_platform, alice):
    with flows.http(services_platform, alice) as client:
        providers = client.get("/api/v1/providers/")
    assert providers.status_code == 200
    assert {p["slug"]: p["status"] for p in providers.json()}["offline"] == "ok"


def test_services_websocket_conversation(services_platform, alice, capsys):
    before = services_platform.worker_tasks_run().get(TASK, 0)
    thread_id = flows.create_thread(services_platform, alice)
    with flows.ws_connect(services_platform, thread_id, token=alice) as ws:
        turn = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(services_platform, alice, thread_id, turn)
        second = flows.ws_turn(ws, QUESTION)
        flows.assert_conversation(services_platform, alice, thread_id, second)
    with capsys.disabled():
        for n, t in enumerate((turn, second), 1):
            print(f"\nBENCH services first_delta_ms={t.first_delta_ms:.1f} mode=services turn={n} "
                  f"events={len(t.events)} total_ms={t.total_ms:.0f}", flush=True)
    # The turns ran on the Celery worker, not in the web process.
    assert services_platform.worker_tasks_run().get(TASK, 0) >= before + 2


def test_services_websocket_access_rules(services_platform, alice):
    thread_id = flows.create_thread(services_platform, alice)
    dave = flows.login_token(services_platform, "dave")
    with flows.ws_connect(services_platform, thread_id, token=dave) as ws:
        assert flows.close_code(ws) == 4404
    with flows.ws_connect(services_platform, thread_id) as ws:
        assert flows.close_code(ws) == 4403
    with flows.ws_connect(services_platform, thread_id, token=alice) as ws:
        ws.send("{oops")
        err = flows.recv_json(ws, timeout=10)
        assert err["type"] == "error" and err["code"] == "invalid_json"
        flows.assert_conversation(services_platform, alice, thread_id, flows.ws_turn(ws, QUESTION))


def test_services_rest_run_and_poll(services_platform, alice):
    before = services_platform.worker_tasks_run().get(TASK, 0)
    thread_id = flows.create_thread(services_platform, alice)
    answer = flows.rest_turn(services_platform, alice, thread_id)
    assert WITH_TOPIC_TITLE in answer["content_html"]
    assert services_platform.worker_tasks_run().get(TASK, 0) >= before + 1


def test_services_manage_ask(services_platform):
    result = services_platform.manage("ask", "--user", "alice", QUESTION, timeout=120, check=False)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "[tool] search_knowledge" in result.stdout
    assert WITH_TOPIC_TITLE in result.stdout
    assert result.stdout.rstrip().endswith("[completed]")
    # The command leaves the thread's group on its own loop: no stream closed at garbage
    # collection without a loop ("Exception ignored … no running event loop").
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_services_upload_is_imported_by_the_celery_worker(services_platform, alice):
    """A knowledge upload is imported by the Celery task ``knowledge.import_upload`` (not in
    the web process): the worker's task count goes up and the item is searchable."""
    import time

    from tests.fakes.documents import make_pdf

    before = services_platform.worker_tasks_run().get("knowledge.import_upload", 0)
    pdf = make_pdf([["Celery imported this quokka handbook."], ["Page two."]])
    with flows.http(services_platform, alice) as client:
        accepted = client.post("/api/v1/knowledge/uploads/", files={"file": ("quokka.pdf", pdf)},
                               data={"workspace": "demo"})
        assert accepted.status_code == 202, accepted.text
        deadline = time.monotonic() + 60
        while not (upload := client.get(f"/api/v1/knowledge/uploads/{accepted.json()['id']}/").json())["done"]:
            assert time.monotonic() < deadline, upload
            time.sleep(0.1)
        assert upload["status"] == "created", upload
        hits = client.get("/api/v1/knowledge/search/", params={"q": "quokka"}).json()["results"]
    assert [h["item_id"] for h in hits] == [upload["item_id"]]
    assert "<mark>quokka</mark>" in hits[0]["snippet_html"]
    assert services_platform.worker_tasks_run().get("knowledge.import_upload", 0) == before + 1


def _poll_run(client, run_id: str) -> dict:
    deadline = time.monotonic() + flows.RUN_TIMEOUT
    while (run := client.get(f"/api/v1/runs/{run_id}/").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.1)
    return run


def test_services_admin_changes_apply_at_once_in_the_web_and_the_worker(services_platform, alice):
    """Admin configuration is cached per process (chatplatform.config_cache), and a change made in
    another process — here ``manage.py shell``, as an admin's or psql's would be — applies to
    the very next send in the web process and the very next turn on the Celery worker, both of
    which had the old configuration cached from earlier turns."""
    thread_id = flows.create_thread(services_platform, alice)
    flows.rest_turn(services_platform, alice, thread_id)  # both processes now hold the configuration
    restrict = ("from agents.models import LLMModel, Provider, Role; p = Provider.objects.get(slug='offline'); "
                "m, _ = LLMModel.objects.get_or_create(provider=p, name=p.default_model); "
                "m.allowed_roles.set([Role.objects.get(name='admin')])")
    allow = "from agents.models import LLMModel; LLMModel.objects.filter(provider__slug='offline').delete()"
    disable = "from agents.models import ToolPolicy; ToolPolicy.objects.filter(tool_name='search_knowledge')"
    try:
        services_platform.manage("shell", "-c", restrict)
        with flows.http(services_platform, alice) as client:
            refused = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": flows.QUESTION})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed", refused.text
        services_platform.manage("shell", "-c", allow)
        services_platform.manage("shell", "-c", f"{disable}.update(enabled=False)")  # a bulk update: no signals
        with flows.http(services_platform, alice) as client:
            sent = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": flows.QUESTION})
            assert sent.status_code == 202, sent.text
            assert _poll_run(client, sent.json()["run_id"])["status"] == "completed"
        msgs = flows.messages(services_platform, alice, thread_id)
        answer = flows.final_assistant(msgs, sent.json()["run_id"])
        assert answer["status"] == "complete" and answer["tool_calls"] == []  # not offered: answered from grounding
        assert not [c for m in msgs if m["run_id"] == sent.json()["run_id"] for c in m["tool_calls"]]
    finally:
        services_platform.manage("shell", "-c", allow)
        services_platform.manage("shell", "-c", f"{disable}.update(enabled=True)")
    flows.rest_turn(services_platform, alice, thread_id)  # enabled again: the tool is called


def test_services_bombs_are_refused_by_the_celery_worker(services_platform, alice):
    """The worker's import path refuses decompression bombs: a .docx from its zip directory,
    deeply nested HTML by the parse process's memory limit (a subprocess of the daemonic
    prefork worker); the worker goes on importing afterwards."""
    from tests.fakes.bombs import docx_bomb, html_bomb

    def imported(client, name, data):
        accepted = client.post("/api/v1/knowledge/uploads/", files={"file": (name, data)}, data={"workspace": "demo"})
        assert accepted.status_code == 202, accepted.text
        deadline = time.monotonic() + 90
        while not (upload := client.get(f"/api/v1/knowledge/uploads/{accepted.json()['id']}/").json())["done"]:
            assert time.monotonic() < deadline, upload
            time.sleep(0.1)
        return upload

    with flows.http(services_platform, alice) as client:
        docx = imported(client, "bomb.docx", docx_bomb(400))
        assert docx["status"] == "failed" and "expands to 401 MB when unpacked" in docx["error"], docx
        html = imported(client, "deep.html", html_bomb(2_000_000))
        assert html["status"] == "failed" and "refused: reading it needed more than" in html["error"], html
        after = imported(client, "after.md", b"# After\n\nThe worker still imports.")
        assert after["status"] == "created", after
