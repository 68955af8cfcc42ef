"""The per-process cache of admin configuration (``chatplatform.config_cache``, issue 18).

Model rows, tool policies and budgets are kept per process under the *configuration
generation*, which database triggers move with every change of a governed table. These tests
check that nothing an administrator (or a bulk update, or raw SQL) changes is ever served
stale: every kind of write is seen by the very next lookup, a rolled-back change is never
served, and an unchanged configuration costs one statement (the generation) per lookup. They
run on SQLite and, in the services pass, on PostgreSQL (``db_backends``): the triggers differ.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.models import LLMModel, Role, ToolPolicy
from agents.pipeline import policy_views
from agents.selectors import model_allowed, model_row
from chatplatform.config_cache import TABLE, config_cached, config_generation
from tests.conftest import make_thread
from usage.models import Budget, ModelPrice
from usage.services import budgets_for

pytestmark = [pytest.mark.db_backends, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def model(openai_provider):
    return LLMModel.objects.create(provider=openai_provider, name="cached-model")


def _allowed(provider, role: str) -> bool:
    return model_allowed(provider=provider, model="cached-model", role_names={role})


def test_an_unchanged_configuration_is_read_once_then_costs_one_statement(model, openai_provider):
    model_row(provider=openai_provider, name="cached-model")
    policy_views()
    budgets_for(user_id=1, workspace_id=1, model_id=model.pk)
    with CaptureQueriesContext(connection) as captured:
        row = model_row(provider=openai_provider, name="cached-model")
        policy_views()
        budgets_for(user_id=1, workspace_id=1, model_id=model.pk)
    assert row.pk == model.pk
    assert [q["sql"] for q in captured.captured_queries] == [f"SELECT generation FROM {TABLE} WHERE id = 1"] * 3


def test_each_kind_of_write_moves_the_generation(model, openai_provider, roles):
    seen = {config_generation()}

    def moved() -> bool:
        generation = config_generation()
        new = generation not in seen
        seen.add(generation)
        return new

    model.label = "Cached"
    model.save()  # UPDATE through the model
    assert moved()
    LLMModel.objects.filter(pk=model.pk).update(enabled=False)  # a bulk update: no signals
    assert moved()
    model.allowed_roles.add(roles["admin"])  # the many-to-many table
    assert moved()
    ModelPrice.objects.create(model=model, input_per_mtok=1, output_per_mtok=2)  # usage app
    assert moved()
    Budget.objects.create(name="b", period="day", metric="tokens", hard_limit=10)
    assert moved()
    Role.objects.filter(pk=roles["admin"].pk).update(name="administrator")
    assert moved()
    with connection.cursor() as cursor:  # raw SQL, as psql would
        cursor.execute("UPDATE agents_toolpolicy SET timeout_s = timeout_s + 1")
    assert moved() == ToolPolicy.objects.exists()
    LLMModel.objects.filter(pk=model.pk).delete()
    assert moved()
    Budget.objects.create(name="c", period="day", metric="tokens", hard_limit=10, workspace=None)
    assert moved()
    LLMModel.objects.filter(pk=-1).update(label="x")  # no row changed: nothing to invalidate
    assert not moved()


def test_a_role_taken_off_a_model_refuses_at_once(model, openai_provider, roles):
    assert _allowed(openai_provider, "member")
    model.allowed_roles.set([roles["admin"]])
    assert not _allowed(openai_provider, "member")
    assert _allowed(openai_provider, "admin")
    LLMModel.objects.filter(pk=model.pk).update(enabled=False)
    assert not _allowed(openai_provider, "admin")
    model.allowed_roles.clear()
    LLMModel.objects.filter(pk=model.pk).update(enabled=True)
    assert _allowed(openai_provider, "member")


def test_a_changed_price_and_a_disabled_tool_are_seen_at_once(model, openai_provider):
    assert not hasattr(model_row(provider=openai_provider, name="cached-model"), "price")  # none yet
    ModelPrice.objects.create(model=model, input_per_mtok=3, output_per_mtok=4)
    assert model_row(provider=openai_provider, name="cached-model").price.output_per_mtok == 4
    ModelPrice.objects.filter(model=model).update(output_per_mtok=5)
    assert model_row(provider=openai_provider, name="cached-model").price.output_per_mtok == 5
    name = next(name for name, view in policy_views().items() if view.enabled)
    ToolPolicy.objects.update_or_create(tool_name=name, defaults={"enabled": False})
    assert policy_views()[name].enabled is False


def test_budgets_created_scoped_and_disabled_apply_to_the_next_lookup(users, workspaces, model):
    alice, demo = users["alice"], workspaces["demo"]

    def names():
        return [b.name for b in budgets_for(user_id=alice.pk, workspace_id=demo.pk, model_id=model.pk)]

    assert names() == []
    team = Budget.objects.create(name="team", workspace=demo, period="day", metric="tokens", hard_limit=100)
    Budget.objects.create(name="bob's", user=users["bob"], period="day", metric="tokens", hard_limit=100)
    Budget.objects.create(name="other model", model=LLMModel.objects.create(provider=model.provider, name="o"),
                          period="day", metric="tokens", hard_limit=100)
    mine = Budget.objects.create(name="alice", user=alice, model=model, period="month", metric="tokens",
                                 hard_limit=100)
    assert names() == ["team", "alice"]
    Budget.objects.filter(pk=team.pk).update(enabled=False)
    assert names() == ["alice"]
    Budget.objects.filter(pk=mine.pk).update(workspace=workspaces["other"])
    assert names() == []


def test_a_rolled_back_change_is_never_served(model, openai_provider, roles):
    assert _allowed(openai_provider, "member")
    with pytest.raises(RuntimeError), transaction.atomic():
        model.allowed_roles.set([roles["admin"]])
        assert not _allowed(openai_provider, "member")  # the transaction sees its own change
        raise RuntimeError("roll back")
    assert _allowed(openai_provider, "member")
    model.allowed_roles.set([roles["admin"]])  # committed now: a new generation, not the rolled-back one
    assert not _allowed(openai_provider, "member")


def test_the_api_refuses_the_next_send_after_an_admin_edit(users, workspaces, model, roles,
                                                                           api_for, settings):
    settings.RUN_EXECUTOR = "none"
    thread = make_thread(users["alice"], workspaces["demo"], model.provider, model="cached-model")
    url = f"/api/v1/threads/{thread.pk}/runs/"
    assert api_for(users["alice"]).post(url, {"content": "one"}, format="json").status_code == 202
    thread.runs.update(status="completed")
    model.allowed_roles.set([roles["admin"]])
    response = api_for(users["alice"]).post(url, {"content": "two"}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "model_not_allowed"


def test_a_value_is_rebuilt_only_when_the_generation_moved(model):
    builds = []

    def build():
        builds.append(1)
        return len(builds)

    assert config_cached("test-key", build) == 1
    assert config_cached("test-key", build) == 1
    model.save()
    assert config_cached("test-key", build) == 2
    assert len(builds) == 2


def test_names_nobody_configured_cannot_grow_the_cache_without_bound(openai_provider, monkeypatch):
    """A thread's model name comes from its user; a name without a row is cached as None. The
    cache keeps at most MAX_ENTRIES values and drops older generations' first."""
    from chatplatform import config_cache

    monkeypatch.setattr(config_cache, "MAX_ENTRIES", 5)
    config_cache.config_cache_clear()
    for i in range(20):
        assert model_row(provider=openai_provider, name=f"made-up-{i}") is None
    assert len(config_cache._values) == 5
    LLMModel.objects.create(provider=openai_provider, name="made-up-19")  # a new generation
    assert model_row(provider=openai_provider, name="made-up-19") is not None  # stale ones made room
    assert list(config_cache._values) == [("model_row", openai_provider.pk, "made-up-19")]


def test_triggers_a_migration_dropped_are_back_after_migrate_and_the_change_is_seen(model, openai_provider):
    """SQLite drops a table's triggers when a migration rebuilds the table; every migrate
    re-installs the missing ones (post_migrate) and moves the generation, so a change made
    while they were missing is not served stale either."""
    from django.core.management import call_command

    from chatplatform.config_cache import install_triggers

    assert install_triggers() == []  # all there after the test database's migrations
    assert _allowed(openai_provider, "member")
    with connection.cursor() as cursor:  # what a table rebuild leaves: no triggers on agents_llmmodel
        for name in [n for n in _trigger_names() if n.startswith("agents_llmmodel_config")]:
            cursor.execute(f"DROP TRIGGER {name}" + (" ON agents_llmmodel" if connection.vendor == "postgresql" else ""))
    LLMModel.objects.filter(pk=model.pk).update(enabled=False)  # unseen: no trigger
    call_command("migrate", verbosity=0)  # nothing to apply; post_migrate re-installs
    assert {n for n in _trigger_names() if n.startswith("agents_llmmodel_config")}
    assert not _allowed(openai_provider, "member")  # the change made without a trigger is seen
    LLMModel.objects.filter(pk=model.pk).update(enabled=True)
    assert _allowed(openai_provider, "member")


def _trigger_names() -> set[str]:
    from chatplatform.config_cache import _installed

    with connection.cursor() as cursor:
        return {name for _table, name in _installed(connection, cursor)}


def test_generations_never_repeat_when_the_table_is_made_again(model, roles):
    """Migrating back past 0014 and forward again makes the table anew: a counted generation
    would start over and meet values processes still hold; random ones do not."""
    from django.core.management import call_command

    seen = {config_generation()}
    for _ in range(5):
        model.save()
        seen.add(config_generation())
    call_command("migrate", "agents", "0013", verbosity=0)
    call_command("migrate", verbosity=0)
    again = {config_generation()}
    for _ in range(5):
        model.allowed_roles.add(roles["admin"])
        model.allowed_roles.clear()
        again.add(config_generation())
    assert len(seen) == 6 and len(again) == 6 and not seen & again


def test_without_the_table_nothing_is_cached_and_lookups_still_work(model, openai_provider, monkeypatch):
    """New code started before ``migrate``: no generation table yet. Lookups read the tables
    every time, as before there was a cache — no error, nothing stale."""
    from chatplatform import config_cache

    monkeypatch.setattr(config_cache, "TABLE", "agents_config_generation_not_made_yet")
    monkeypatch.setattr(config_cache, "_table_seen", False)
    builds = []
    for _ in range(3):
        assert config_cached("no-table", lambda: builds.append(1) or len(builds)) == len(builds)
    assert len(builds) == 3
    assert _allowed(openai_provider, "member")
    model.allowed_roles.set([Role.objects.get(name="admin")])
    assert not _allowed(openai_provider, "member")
