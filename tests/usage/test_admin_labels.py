"""Admin labels people read (issue 54): "LLM models", budget limits without the column's six
decimal places; ``/favicon.ico`` is not a 404."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from usage.models import Budget
from usage.services import limit_text

pytestmark = pytest.mark.django_db


def test_limit_text():
    assert limit_text(Decimal("800000.000000"), metric="tokens") == "800,000 tokens"
    assert limit_text(Decimal("12.500000"), metric="cost", currency="USD") == "12.5 USD"
    assert limit_text(Decimal("1500.000000"), metric="cost", currency="EUR") == "1,500 EUR"
    assert limit_text(None, metric="tokens") == "—"


def test_admin_shows_llm_models_and_readable_limits(django_user_model, workspaces):
    admin_user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root")
    Budget.objects.create(workspace=workspaces["demo"], metric="tokens", hard_limit=Decimal("800000"),
                          soft_limit=Decimal("200000"))
    client = Client()
    client.force_login(admin_user)
    index = client.get("/admin/").content.decode()
    assert "LLM models" in index and "Llm models" not in index
    budgets = client.get("/admin/usage/budget/").content.decode()
    assert "800,000 tokens" in budgets and "200,000 tokens" in budgets and "800000.000000" not in budgets


def test_favicon_is_not_a_404():
    response = Client().get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("chat/favicon.svg")
