"""A hard token budget holds across real processes: four runs sent at once to a production
platform (daphne, a Celery worker with 8 turn threads, PostgreSQL, Redis) against a
30,000-token daily budget spend no more than the limit. The fake upstream answers every
request with a tool call (so each run goes on round after round) and reports the usage of a
model that writes as long as it may: input counted from the request (4 bytes a token), output
equal to the ``max_tokens`` it was sent (20,000 when none). Before, a round reserved a fixed
8,000 tokens and sent no ``max_tokens``, and the runs spent several times the limit. The same
admission on SQLite in embedded mode: ``tests/usage/test_budget_reservations.py``.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.fakes.openai_server import tool_call_chunks, usage_chunk

from . import flows
from .harness import Platform, require_services, services_unreachable_reason, started

pytestmark = pytest.mark.services

LIMIT = 30_000
QUESTION = "Look this up in the knowledge base and summarise what you find, in detail. " * 40


def large_usage_tool_round(body: dict) -> list:
    wire = json.dumps(body.get("messages"), ensure_ascii=False) + json.dumps(body.get("tools") or [],
                                                                            ensure_ascii=False)
    return tool_call_chunks([("c1", "search_knowledge", '{"query": "budgets"}')]) + [
        usage_chunk(math.ceil(len(wire.encode("utf-8")) / 4), body.get("max_tokens") or 20_000)]


@pytest.fixture(scope="module")
def platform(upstream):
    require_services(services_unreachable_reason())
    env = {"OPENAI_API_KEY": upstream.api_key, "OPENAI_BASE_URL": upstream.base_url, "OPENAI_MODEL": "fake-model",
           "BUDGET_ROUND_MAX_OUTPUT_TOKENS": "2000"}
    yield from started(Platform("services", extra_env=env))


SPENT = """
import json
from django.db.models import Sum
from usage.models import BudgetWindow, UsageRecord
sums = UsageRecord.objects.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
w = BudgetWindow.objects.get(budget__name="e2e-30k")
print(json.dumps({"spent": (sums["i"] or 0) + (sums["o"] or 0), "window_spent": int(w.spent),
                  "in_flight": w.in_flight, "reserved": int(getattr(w, "reserved", 0))}))
"""


def test_four_runs_at_once_spend_no_more_than_the_hard_limit(platform, upstream):
    platform.manage("shell", "-c", (
        "from chat.models import Workspace\nfrom usage.models import Budget\n"
        f"Budget.objects.create(name='e2e-30k', workspace=Workspace.objects.get(slug='demo'), metric='tokens', "
        f"period='day', "
        f"hard_limit={LIMIT})\n"))
    upstream.script(*[large_usage_tool_round] * 200)
    first_request = len(upstream.requests)
    token = flows.login_token(platform, "alice")
    threads = [flows.create_thread(platform, token, provider="openai") for _ in range(4)]
    run_ids = []
    with flows.http(platform, token) as client:
        for thread_id in threads:
            r = client.post(f"/api/v1/threads/{thread_id}/runs/", json={"content": QUESTION})
            assert r.status_code == 202, r.text
            run_ids.append(r.json()["run_id"])
    rows = flows.wait_for(
        lambda: (rows := flows.run_rows(platform, run_ids, "status", "error"))
        and all(status in ("completed", "failed", "cancelled") for status, _ in rows.values()) and rows,
        "the four runs to end", timeout=120)

    totals = json.loads(platform.manage("shell", "-c", SPENT).stdout.strip().splitlines()[-1])
    sent = upstream.requests[first_request:]
    print(f"\nproduction: {totals['spent']} tokens spent in {len(sent)} rounds; max_tokens sent "
          f"{[body.get('max_tokens') for body in sent]}")
    assert len(sent) >= 2
    assert totals["spent"] <= LIMIT, totals
    assert all(isinstance(body.get("max_tokens"), int) and 256 <= body["max_tokens"] <= 2000 for body in sent)
    assert {error["code"] for _status, error in rows.values()} == {"budget_exceeded"}
    assert totals == {"spent": totals["spent"], "window_spent": totals["spent"], "in_flight": 0, "reserved": 0}
