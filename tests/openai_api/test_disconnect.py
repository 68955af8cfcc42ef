"""``COMPAT_API_CANCEL_ON_DISCONNECT``: a ``/v1`` streaming client's disconnect cancels its
run (``openai_api.services.completion_abandoned``), unless the setting is off. The whole
path — the real ``openai`` SDK closing the stream against a running server, the worker
closing the upstream stream — is tested in ``tests/e2e/test_openai_api_disconnect.py``."""

from __future__ import annotations

import pytest

from agents.models import Run
from openai_api.services import completion_abandoned
from tests.conftest import make_thread

pytestmark = pytest.mark.django_db(transaction=True)


def _running(users, workspaces, provider) -> Run:
    thread = make_thread(users["alice"], workspaces["demo"], provider)
    return Run.objects.create(thread=thread, user=users["alice"], provider=provider, model="fake-model",
                              status=Run.Status.RUNNING)


def test_a_disconnect_cancels_the_run_by_default(users, workspaces, openai_provider):
    run = _running(users, workspaces, openai_provider)
    assert completion_abandoned(run_id=str(run.pk), user=users["alice"]) is True
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    assert completion_abandoned(run_id=str(run.pk), user=users["alice"]) is False  # ended: nothing to do


def test_with_the_setting_off_the_run_goes_on(users, workspaces, openai_provider, settings):
    settings.COMPAT_API_CANCEL_ON_DISCONNECT = False
    run = _running(users, workspaces, openai_provider)
    assert completion_abandoned(run_id=str(run.pk), user=users["alice"]) is False
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING
