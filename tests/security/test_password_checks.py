"""A burst of sign-ins checks passwords a few at a time (chatplatform.auth_backends)."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.hashers import check_password as real_check_password

import chatplatform.auth_backends as auth_backends

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_of_sign_ins_checks_at_most_the_configured_passwords_at_once(settings, monkeypatch, users):
    settings.PASSWORD_CHECKS_AT_ONCE = 2
    monkeypatch.setattr(auth_backends, "_slots", None)  # sized from the setting on first use
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    def slow_check(self, raw_password):  # a slow hasher, observed
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)
        try:
            return real_check_password(raw_password, self.password)
        finally:
            with lock:
                state["now"] -= 1

    from django.contrib.auth.models import AbstractBaseUser

    monkeypatch.setattr(AbstractBaseUser, "check_password", slow_check)
    results = []

    def sign_in(password):
        from django.db import connection

        results.append(authenticate(username="alice", password=password))
        connection.close()

    workers = [threading.Thread(target=sign_in, args=("pw-alice" if n % 2 else "wrong",)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert state["most"] == 2
    assert sorted(user is not None for user in results) == [False] * 4 + [True] * 4
    assert all(user.username == "alice" for user in results if user is not None)
