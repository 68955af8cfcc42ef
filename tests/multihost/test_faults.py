"""Faults across hosts (issue 59), on one cluster of network namespaces (``cluster.py``).

Each test breaks something while chats stream through ``lb`` and asserts that every run ends
``completed``, that every resumed stream carried every stored word once (gapless seqs 1…N over
all reconnects), that a write tool's side effect happened once (counted at the counter server
in the test process), and measures the recovery: printed as ``MULTIHOST <fault> …`` at the
end of the session (``conftest.pytest_terminal_summary``). Each test leaves the cluster whole
again for the next.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import httpx
import pytest

from tests.e2e import flows

from .chats import Chat, check_runs, start_chats, wait_streaming
from .conftest import AFTER_TOOL, record

pytestmark = [pytest.mark.services, pytest.mark.multihost]


@pytest.fixture
def token(cluster):
    return flows.login_token(cluster, "alice")


@pytest.fixture
def model(cluster):
    """The fake model, its pace restored after the test."""
    yield cluster.model
    cluster.model.delay_s = 0.02


def restore_worker(cluster, host: str) -> None:
    cluster.kill(host, "celery")
    cluster.link(host, True)
    cluster.start_worker(host)
    cluster.wait_worker(host)


def worker_host_of(cluster, run_id: str) -> str:
    """The host whose Celery worker holds ``run_id``'s lease (owner ``host:pid:thread``)."""
    owner = cluster.sql("SELECT lease_owner FROM agents_run WHERE id = %s", run_id)[0][0]
    pid = int(owner.split(":")[1])
    for host in ("work1", "work2"):
        proc = cluster.procs[host].get("celery")
        if proc is not None and proc.pid == pid:
            return host
    raise AssertionError(f"no worker host runs pid {pid} ({owner})")


def test_a_chat_streams_through_lb_across_hosts(cluster, token):
    chats = start_chats(cluster, token, 2)
    result = check_runs(cluster, chats)
    assert result["reconnects"] == 0


def test_web1_lost_mid_stream(cluster, token, model):
    """web1's link goes down and its processes die; its sockets are cut by HAProxy once the
    health check fails, the clients reconnect through lb to web2 and resume after their last
    seq."""
    model.delay_s = 0.1  # 6 s an answer
    chats = start_chats(cluster, token, 4)
    wait_streaming(chats)
    lost = time.monotonic()
    cluster.link("web1", False)
    cluster.kill_host("web1")
    result = check_runs(cluster, chats)
    resumed = [c.resumed_at - lost for c in chats if c.resumed_at]
    assert resumed, f"no chat was on web1 (leastconn spreads them): {result}"
    record("web1_lost", recovery_s=max(resumed), resumed_chats=len(resumed), **result)
    cluster.link("web1", True)
    cluster.start_web("web1")
    cluster.wait_backend("web1", "UP")


def test_work_host_lost_mid_tool_call(cluster, token):
    """The worker host running a write tool is lost (link down, processes killed): the reaper on
    the other worker host re-queues the run when its lease expires; the resumed run never runs
    the write again (outcome unknown) and completes there."""
    marker = f"once-{uuid.uuid4().hex[:8]}"
    chat = Chat(cluster, token, f"write {marker}")
    chat.start()
    flows.wait_for(lambda: cluster.counter.count(marker) == 1 and chat.run_id, "the write to start", timeout=30)
    victim = worker_host_of(cluster, chat.run_id)
    lost = time.monotonic()
    cluster.link(victim, False)
    cluster.kill_host(victim)
    result = check_runs(cluster, [chat])
    recovery = chat.ended_at - lost
    assert cluster.counter.count(marker) == 1, cluster.counter.lines
    attempts = cluster.sql("SELECT attempts FROM agents_run WHERE id = %s", chat.run_id)[0][0]
    assert attempts == 1
    assert chat.text.endswith(AFTER_TOOL)
    record("worker_lost_mid_tool", host=victim, recovery_s=recovery, duplicates=cluster.counter.count(marker) - 1,
           **result)
    restore_worker(cluster, victim)


def test_work1_partitioned_from_redis_for_20s(cluster, token, model):
    """work1 loses Redis (broker, channel layer, cache, event log) for 20 s while its turns
    stream, and more chats arrive; then the partition heals. Every run completes, no word
    lost, and work1 takes turns again afterwards."""
    model.delay_s = 0.15  # 9 s an answer: turns on work1 are mid-stream when it is cut
    chats = start_chats(cluster, token, 6)
    wait_streaming(chats)
    cluster.partition("work1", sorted(set(cluster.redis_hosts + cluster.sentinels)))
    cut = time.monotonic()
    chats += start_chats(cluster, token, 2)  # arriving meanwhile: work2 takes them
    while time.monotonic() - cut < 20:  # the fault's length, not a wait for a condition
        time.sleep(0.5)
    cluster.heal("work1")
    healed = time.monotonic()
    result = check_runs(cluster, chats, timeout=150)
    done = max(c.ended_at for c in chats) - healed
    cluster.wait_worker("work1", timeout=60)
    back = time.monotonic() - healed
    record("work1_redis_partition_20s", runs_done_after_heal_s=done, worker_ping_after_heal_s=back, **result)


def test_web2_partitioned_from_postgres_for_15s(cluster, token, model):
    """web2 cannot reach PostgreSQL for 15 s while sockets on it stream; the streams go on (or
    reconnect through lb and resume), and web2 answers database-backed requests again after."""
    model.delay_s = 0.1
    chats = start_chats(cluster, token, 4)
    wait_streaming(chats)
    cluster.partition("web2", ["pg"])
    cut = time.monotonic()
    while time.monotonic() - cut < 15:
        time.sleep(0.5)
    cluster.heal("web2")
    healed = time.monotonic()
    result = check_runs(cluster, chats)

    def web2_serves():
        try:
            r = httpx.get(f"{cluster.web_url('web2')}/api/v1/threads/", timeout=3, trust_env=False,
                                headers={"Authorization": f"Token {token}", "Host": cluster.ip("lb")})
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    flows.wait_for(web2_serves, "web2 to serve from the database again", timeout=60)
    record("web2_pg_partition_15s", web2_recovery_s=time.monotonic() - healed, **result)


def test_postgres_restarted(cluster, token, model):
    """PostgreSQL restarts (fast shutdown: every connection cut) under streaming chats."""
    model.delay_s = 0.1
    chats = start_chats(cluster, token, 4)
    wait_streaming(chats)
    began = time.monotonic()
    cluster.pg_ctl("restart", "-m", "fast")
    restarted = time.monotonic()
    result = check_runs(cluster, chats)
    done_s = max(c.ended_at for c in chats) - restarted
    later = Chat(cluster, token)  # a new chat after the restart
    sent = time.monotonic()
    later.start()
    check_runs(cluster, [later])
    record("postgres_restart", restart_s=restarted - began, runs_done_after_restart_s=done_s,
           new_chat_s=later.ended_at - sent, **result)


def test_redis_primary_killed(cluster, token, model):
    """The Redis primary's process is SIGKILLed under streaming chats: the Sentinels promote
    the replica on the other host, every client finds it through them, every run completes
    with every word. The old primary comes back as a replica of the new one."""
    model.delay_s = 0.1
    chats = start_chats(cluster, token, 4)
    wait_streaming(chats)
    old = cluster.master_host()
    assert old in ("redis1", "redis2"), old
    killed = time.monotonic()
    cluster.kill(old, "redis")
    new = flows.wait_for(lambda: (h := cluster.master_host()) not in (None, old) and h,
                         "a Sentinel to name the replica master", timeout=30)
    promoted_s = time.monotonic() - killed
    result = check_runs(cluster, chats)
    done_s = max(c.ended_at for c in chats) - killed
    cluster.start_redis(old, replica_of=new)
    later = Chat(cluster, token)
    sent = time.monotonic()
    later.start()
    check_runs(cluster, [later])
    record("redis_primary_killed", old=old, new=new, promoted_s=promoted_s, runs_done_after_kill_s=done_s,
           new_chat_s=later.ended_at - sent, **result)


def test_a_host_clock_3s_ahead(cluster, token, model):
    """work2's clock runs 3 s ahead (libfaketime) while both workers run turns longer than a
    lease: no healthy run is taken for lost (``attempts`` stays 0) — the lease times and the
    reaper's comparisons come from the database's clock, not each host's."""
    cluster.kill("work2", "celery", signal.SIGTERM)
    cluster.start_worker("work2", faketime="+3s")
    cluster.wait_worker("work2")
    model.delay_s = 0.1  # 6 s an answer, past a 3 s lease
    try:
        chats = start_chats(cluster, token, 8)
        # Some of them must run on work1 (the right clock), whose leases work2's reaper judges.
        on_work1 = set()
        while not all(c.done or c.error for c in chats):
            for run_id, owner in cluster.sql("SELECT id::text, lease_owner FROM agents_run WHERE status = 'running'"):
                if owner and int(owner.split(":")[1]) == cluster.procs["work1"]["celery"].pid:
                    on_work1.add(run_id)
            time.sleep(0.3)
        assert on_work1, "no run went to work1: the skew was not put to the test"
        result = check_runs(cluster, chats)
        ids = [c.run_id for c in chats]
        attempts = flows.run_rows(cluster, ids, "attempts")
        reaped = sum(1 for (n,) in attempts.values() if n)
        assert reaped == 0, f"healthy runs re-queued by the host ahead: {attempts}"
        record("clock_3s_ahead", runs_on_work1=len(on_work1), reaped_healthy_runs=reaped, **result)
    finally:
        cluster.kill("work2", "celery", signal.SIGTERM)
        cluster.start_worker("work2")
        cluster.wait_worker("work2")


def test_rolling_restart_under_load(cluster, token, model):
    """web1, web2, work1, work2 restarted one at a time (SIGTERM, wait for the exit, start,
    wait until HAProxy's health check (web) or a ping (worker) says it is up) while new chats
    start every half second: nothing lost."""
    model.delay_s = 0.05  # 3 s an answer
    chats: list[Chat] = []
    began = time.monotonic()

    def more(n: int = 1) -> None:
        chats.extend(start_chats(cluster, token, n))

    more(4)
    steps = {}
    for host in ("web1", "web2", "work1", "work2"):
        t0 = time.monotonic()
        name = "web" if host.startswith("web") else "celery"
        proc = cluster.procs[host][name]
        if name == "web":  # README: drain in HAProxy first, so no new request goes to it
            cluster.haproxy(f"set server web/{host} state drain")
        os.killpg(proc.pid, signal.SIGTERM)
        while proc.poll() is None:
            assert time.monotonic() - t0 < 90, f"{host} did not stop"
            more()
            time.sleep(0.5)
        del cluster.procs[host][name]
        if name == "web":
            cluster.start_web(host)
            while not cluster.web_ready(host):  # its own page first, then back into the pool
                assert time.monotonic() - t0 < 90, f"{host} did not come back"
                more()
                time.sleep(0.5)
            cluster.haproxy(f"set server web/{host} state ready")
            while not cluster.backend_status().get(host, "").startswith("UP"):
                assert time.monotonic() - t0 < 90, f"{host} not UP again: {cluster.backend_status()}"
                more()
                time.sleep(0.5)
        else:
            cluster.start_worker(host)
            cluster.wait_worker(host)
            more()
        steps[host] = round(time.monotonic() - t0, 1)
    result = check_runs(cluster, chats, timeout=150)
    record("rolling_restart", total_s=time.monotonic() - began, steps=steps, **result)
