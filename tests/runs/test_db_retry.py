"""``chatplatform.db.retry_transient``: a lost database connection is retried outside a
transaction, for a bounded time, and never inside one (issue 17: database blips). The
blip itself against a real PostgreSQL is in ``tests/e2e/test_db_blip.py``."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, InterfaceError, OperationalError, transaction

from agents.models import Run
from chatplatform.db import retry_transient


class Flaky:
    """Raises ``error`` the first ``failures`` calls, then returns the number of calls."""

    def __init__(self, failures: int, error: type[Exception] = OperationalError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("server closed the connection unexpectedly")
        return self.calls


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_lost_connection_is_retried_until_it_works(error):
    flaky = Flaky(failures=3, error=error)
    assert retry_transient(flaky, budget_s=5)() == 4
    assert Run.objects.count() == 0  # the connection works again after the retries


@pytest.mark.django_db(transaction=True)
def test_the_retries_stop_at_the_budget():
    flaky = Flaky(failures=1000)
    with pytest.raises(OperationalError):
        retry_transient(flaky, budget_s=0.5)()
    assert 2 <= flaky.calls < 10  # 0.1 + 0.2 (+ 0.4 would pass the budget): a few tries, not a spin


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_error_is_raised_at_once():
    flaky = Flaky(failures=1)
    with pytest.raises(OperationalError), transaction.atomic():
        retry_transient(flaky, budget_s=5)()
    assert flaky.calls == 1  # the transaction is gone: only its outermost caller may repeat it


@pytest.mark.django_db(transaction=True)
def test_other_database_errors_are_not_retried():
    flaky = Flaky(failures=1, error=IntegrityError)
    with pytest.raises(IntegrityError):
        retry_transient(flaky, budget_s=5)()
    assert flaky.calls == 1
