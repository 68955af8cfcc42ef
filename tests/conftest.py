"""Shared fixtures.

* A network guard: any connection to a non-loopback address fails the test (no test may
  depend on the internet).
* Demo-like data: roles (seeded by migration), workspaces ``demo``/``other``, users alice,
  bob (members), carol (viewer), dave (other workspace), admin (demo admin).
* ``events``: subscribe to a thread's group on the real channel layer and collect a run's
  events until its terminal event.
* ``fake_openai``: the fake OpenAI-compatible server (real HTTP on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import os
import socket
from pathlib import Path

import pytest
from channels.layers import get_channel_layer

from agents.events import thread_group
from agents.models import Provider, Role
from agents.roles import ensure_default_roles
from agents.services import run_create
from chat.models import Membership, Thread, Workspace
from chatplatform.loops import run_coroutine
from tests.fakes.openai_server import FakeOpenAI

# The platforms the end-to-end tests start (tests/e2e/harness.py) hash passwords cheaply.
os.environ.setdefault("E2E_SETTINGS_MODULE", "tests.e2e.settings")

CASES = Path(__file__).parent / "cases"
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}

_real_connect = socket.socket.connect
# RFC 2544's benchmarking range, never routed: the multi-host tests (tests/multihost) give it
# to network namespaces of their own, so a connection there stays on this machine.
_NAMESPACE_NET = ipaddress.ip_network("198.18.0.0/15")


def _guarded_connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            ip = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            ip = None  # hostnames resolve first; the resolved address comes back here
        if ip is not None and not ip.is_loopback and ip not in _NAMESPACE_NET:
            raise OSError(f"test network guard: connection to {host} refused (loopback only)")
    return _real_connect(self, address)


@pytest.fixture(autouse=True, scope="session")
def loopback_only():
    socket.socket.connect = _guarded_connect
    yield
    socket.socket.connect = _real_connect


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, and before they are dropped, PostgreSQL sessions that
    other threads of this process still hold on them ended (``pg_terminate_backend``).
    Django closes its connection pool first, but a pool cannot close a connection a thread has
    not handed back — a background thread (a tool call's, the lease heartbeat's) still
    connected when the session ends — and PostgreSQL refuses ``DROP DATABASE`` while any is
    open ("being accessed by other users"), leaving the database behind."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                continue
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            connection.close()


_undrained: list[tuple[str, int]] = []


def pytest_collection_modifyitems(config, items):
    """Longest files first: the multi-host files, browser files, then the other end-to-end files and the files marked
    ``heavy`` (each group biggest file first), then the rest in collection order. ``make test`` hands whole files to two processes
    (``--dist loadfile``) in this order, so a long browser file never starts last and leaves
    one process working alone at the end."""
    per_file = collections.Counter(item.nodeid.split("::", 1)[0] for item in items)

    def weight(item) -> tuple[int, int, int]:
        path = item.nodeid.split("::", 1)[0]
        group = (-1 if item.get_closest_marker("multihost") is not None  # one cluster, minutes: first of all
                 else 0 if item.get_closest_marker("browser") is not None
                 else 1 if path.startswith("tests/e2e/") or item.get_closest_marker("heavy") is not None else 2)
        heavy = item.get_closest_marker("heavy") is not None  # one long test: its count says nothing
        return group, 0 if heavy else 1, -per_file[path] if group < 2 else 0  # the biggest files first

    items.sort(key=weight)  # stable: a file's tests stay together and in order


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before any fixture is torn down (the database flush among them), wait for the turns this
    test handed to the embedded pool: a turn that outlives its test writes into the next
    test's database."""
    from agents.runs.executors import drain_embedded

    left = drain_embedded(timeout_s=10.0)
    if left:
        _undrained.append((item.nodeid, left))
    yield


def pytest_terminal_summary(terminalreporter):
    for nodeid, left in _undrained:
        terminalreporter.write_line(f"embedded pool not idle 10 s after {nodeid}: {left} turn(s) still running")


def load_case(relpath: str) -> dict:
    return json.loads((CASES / relpath).read_text())


# --- clients -------------------------------------------------------------------------------
@pytest.fixture
def api_for():
    """``api_for(user)`` → a DRF ``APIClient`` authenticated as ``user``; ``api_for()`` is
    anonymous."""
    from rest_framework.test import APIClient

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


# --- data ---------------------------------------------------------------------------------
@pytest.fixture
def roles(db):
    ensure_default_roles(Role)  # transactional tests flush the migration's rows
    return {r.name: r for r in Role.objects.all()}


@pytest.fixture
def workspaces(db):
    # Not admin-blind: these are the workspaces the tests written before the setting (issue 57)
    # exercise — an admin reads a member's chat. tests/security/test_admin_blind.py blinds them.
    return {
        "demo": Workspace.objects.create(slug="demo", name="Demo team", admin_blind=False),
        "other": Workspace.objects.create(slug="other", name="Other team", admin_blind=False),
    }


@pytest.fixture
def users(db, roles, workspaces, django_user_model):
    spec = [("alice", "demo", "member"), ("bob", "demo", "member"), ("carol", "demo", "viewer"),
            ("dave", "other", "member"), ("admin", "demo", "admin")]
    out = {}
    for name, ws, role in spec:
        user = django_user_model.objects.create_user(username=name, password="pw-" + name)
        Membership.objects.create(user=user, workspace=workspaces[ws], role=roles[role])
        out[name] = user
    return out


@pytest.fixture
def offline(db):
    return Provider.objects.create(slug="offline", name="Offline", kind="offline", default_model="rule-based")


@pytest.fixture
def fake_openai():
    fake = FakeOpenAI(api_key="sk-test").start()
    yield fake
    fake.stop()


@pytest.fixture
def openai_provider(db, fake_openai, monkeypatch):
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test")
    return Provider.objects.create(
        slug="fake-openai", name="Fake OpenAI", kind="openai_compatible", base_url=fake_openai.base_url,
        api_key_env="TEST_OPENAI_KEY", default_model="fake-model",
    )


@pytest.fixture
def scripted_model(monkeypatch):
    """Serve every run's model requests from an in-process :class:`tests.scripted.ScriptedModel`
    (no HTTP): ``scripted_model.script(says("Hi"))``; ``.requests`` holds what the loop sent."""
    from tests.scripted import ScriptedModel

    model = ScriptedModel()
    monkeypatch.setattr("agents.backends.model.provider_for", lambda provider: model)
    return model


def make_thread(user, workspace, provider, **fields) -> Thread:
    return Thread.objects.create(owner=user, workspace=workspace, provider=provider,
                                 model=fields.pop("model", provider.default_model if provider else ""), **fields)


# --- events -------------------------------------------------------------------------------
class EventSink:
    """Collects the events published to one thread's group (real channel layer)."""

    def __init__(self, thread_id) -> None:
        self.layer = get_channel_layer()
        self.group = thread_group(thread_id)
        self.channel = run_coroutine(self.layer.new_channel())
        run_coroutine(self.layer.group_add(self.group, self.channel))

    def until_any(self, run_id, timeout: float = 30.0) -> dict:
        """The next event of ``run_id``."""
        while True:
            msg = run_coroutine(asyncio.wait_for(self.layer.receive(self.channel), timeout))
            if str(msg["event"]["run_id"]) == str(run_id):
                return msg["event"]

    def until_parked(self, run_id, timeout: float = 30.0) -> list[dict]:
        """Events of ``run_id`` up to its ``approval.requested``, returned once the run has
        also been handed to a person (status ``awaiting_approval``, no worker holding it)."""
        import time

        from agents.models import Run

        events = [self.until_any(run_id, timeout)]
        while events[-1]["type"] != "approval.requested":
            events.append(self.until_any(run_id, timeout))
        deadline = time.monotonic() + timeout
        while Run.objects.get(pk=run_id).status != Run.Status.AWAITING_APPROVAL:
            assert time.monotonic() < deadline, "the run never parked for approval"
            time.sleep(0.02)
        return events

    def until_terminal(self, run_id, timeout: float = 30.0) -> list[dict]:
        events = []
        while True:
            msg = run_coroutine(asyncio.wait_for(self.layer.receive(self.channel), timeout))
            event = msg["event"]
            if str(event["run_id"]) != str(run_id):
                continue
            events.append(event)
            if event["type"] in TERMINAL:
                return events

    def close(self) -> None:
        run_coroutine(self.layer.group_discard(self.group, self.channel))


@pytest.fixture
def sink_for():
    sinks = []

    def make(thread_id) -> EventSink:
        sink = EventSink(thread_id)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.close()


@pytest.fixture
def converse(sink_for):
    """``converse(thread, user, "text") -> (run, events)``: one turn through the real path
    (run_create → embedded executor → run_turn → channel layer), waiting for the end."""

    def go(thread, user, content, **kwargs):
        sink = sink_for(thread.pk)
        created = run_create(thread=thread, user=user, content=content, **kwargs)
        events = sink.until_terminal(created.run.pk)
        sink.close()
        created.run.refresh_from_db()
        return created.run, events

    return go


def types(events) -> list[str]:
    return [e["type"] for e in events]


def joined_text(events) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "text.delta")
