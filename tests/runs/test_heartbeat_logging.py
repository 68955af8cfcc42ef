"""The lease heartbeat during a database outage logs its traceback once, then one line per
failed beat, and says when renewals work again (an outage logged a traceback every second per
worker)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import OperationalError

from agents.runs import lease as lease_module

pytestmark = pytest.mark.django_db(transaction=True)


class _Lease:
    """What the heartbeat loop reads of a lease."""

    interval = 0.01
    lost = False
    run_id = "run-1"
    owner = "worker:1:1"

    def __init__(self) -> None:
        self._cancelled = threading.Event()


def test_an_outage_logs_the_renewal_traceback_once(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="agents.runs.lease")
    heartbeat = lease_module._Heartbeat()
    beats = []

    def beat(due):
        beats.append(len(due))
        if len(beats) <= 6:  # three beats fail (each tries twice: a dropped idle connection)
            raise OperationalError("connection failed: Connection refused")

    monkeypatch.setattr(heartbeat, "_beat", beat)
    lease = _Lease()
    heartbeat._leases.add(lease)
    thread = threading.Thread(target=heartbeat._loop, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(beats) < 8:
        assert time.monotonic() < deadline, beats
        time.sleep(0.01)
    heartbeat.discard(lease)
    heartbeat._woken.set()
    thread.join(5)
    records = [r for r in caplog.records if r.name == "agents.runs.lease"]
    failed = [r for r in records if r.getMessage().startswith("lease renewal of 1 runs failed")]
    assert [bool(r.exc_info) for r in failed] == [True, False, False]
    assert failed[1].getMessage() == "lease renewal of 1 runs failed: OperationalError: connection failed: Connection refused"
    assert [r.getMessage() for r in records if r.levelname == "INFO"] == ["lease renewal works again"]
