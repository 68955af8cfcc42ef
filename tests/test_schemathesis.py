"""Property-based API test: schemathesis generates requests from our OpenAPI schema and
checks that nothing answers 5xx and every documented response matches its schema."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.conftest import make_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.heavy]

EXAMPLES_PER_OPERATION = 25


def operations():
    from django.core.wsgi import get_wsgi_application

    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
    return [result.ok() for result in schema.get_all_operations() if not result.ok().path.endswith("/events/")]


def test_api_never_5xx_and_matches_schema(users, workspaces, offline, settings):
    settings.RUN_RATE_LIMIT = "100000/60"
    settings.MAX_ACTIVE_RUNS_PER_USER = 100000
    settings.RUN_EXECUTOR = "none"  # runs are created, never executed: this test is about the HTTP layer
    make_thread(users["alice"], workspaces["demo"], offline, title="fuzzed")
    headers = {"Authorization": f"Token {Token.objects.get_or_create(user=users['alice'])[0].key}"}
    ops = operations()
    assert len(ops) >= 15
    failures = []
    for operation in ops:

        @given(case=operation.as_strategy())
        @hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate(headers=headers, checks=[not_a_server_error, response_schema_conformance])

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
