"""Decompression bombs and parser-expensive files (``knowledge.parse_guard``): each parsed
format is refused within seconds with a reason for the uploader, nothing is stored, and the
process that imports (web, embedded executor thread, Celery task) does not grow."""

from __future__ import annotations

import multiprocessing
import resource
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from knowledge.models import KnowledgeItem
from knowledge.uploads import knowledge_upload_create, knowledge_upload_process
from tests.fakes.bombs import docx_bomb, html_bomb, pdf_bomb
from tests.fakes.documents import make_docx

pytestmark = pytest.mark.db_backends

URL = "/api/v1/knowledge/uploads/"
# The importing process may not grow by more than this while a bomb is refused (the bombs
# unpack to hundreds of MB or more; in-process parsing grew a web process by 1.5 GB).
PARENT_GROWTH_KB = 100 * 1024


def peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.fixture
def tight(settings):
    """Limits small enough that a bomb that passes the first check is stopped quickly."""
    settings.KNOWLEDGE_PARSE_MEMORY_MB = 300
    settings.KNOWLEDGE_PARSE_CPU_S = 4
    settings.KNOWLEDGE_PARSE_TIMEOUT_S = 30
    return settings


def refuse(users, workspaces, name: str, data: bytes) -> tuple[str, float, int]:
    """Upload ``data`` and run its import here; ``(error, seconds, parent growth KB)``."""
    pending = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename=name, data=data)
    before, started = peak_kb(), time.monotonic()
    assert knowledge_upload_process(upload_id=pending.pk) == "failed"
    elapsed, grown = time.monotonic() - started, peak_kb() - before
    pending.refresh_from_db()
    assert pending.item_id is None and bytes(pending.data) == b""
    assert KnowledgeItem.objects.count() == 0
    return pending.error, elapsed, grown


@pytest.mark.django_db(transaction=True)
def test_a_docx_bomb_uploaded_is_refused_from_its_central_directory(workspaces, users):
    bomb = docx_bomb(400)  # 400 MB of document.xml
    assert len(bomb) < 2 * 1024 * 1024
    client = APIClient()
    client.force_authenticate(users["alice"])
    before, started = peak_kb(), time.monotonic()
    response = client.post(URL, {"file": SimpleUploadedFile("bomb.docx", bomb), "workspace": "demo"}, format="multipart")
    assert response.status_code == 202, response.json()
    upload_id = response.json()["id"]
    while not (body := client.get(f"{URL}{upload_id}/").json())["done"]:
        assert time.monotonic() - started < 20, "the bomb was not refused within 20 s"
        time.sleep(0.05)
    assert body["status"] == "failed"
    assert body["error"].startswith("bomb.docx: refused: it expands to 401 MB when unpacked (at most 100 MB)"), body
    assert peak_kb() - before < PARENT_GROWTH_KB
    assert KnowledgeItem.objects.count() == 0


@pytest.mark.django_db
def test_a_docx_bomb_past_the_first_check_is_stopped_by_the_parse_limits(workspaces, users, tight):
    tight.KNOWLEDGE_ARCHIVE_MAX_BYTES = 10**12  # as if the central directory had not given it away
    tight.KNOWLEDGE_ARCHIVE_MAX_RATIO = 10**9
    bomb = docx_bomb(400)
    error, elapsed, grown = refuse(users, workspaces, "bomb.docx", bomb)
    assert error == ("bomb.docx: refused: reading it needed more than 300 MB of memory "
                     "(KNOWLEDGE_PARSE_MEMORY_MB) — a decompression bomb?")
    assert elapsed < 20 and grown < PARENT_GROWTH_KB


@pytest.mark.django_db
def test_too_many_entries_or_too_high_a_ratio_are_refused(workspaces, users, settings):
    settings.KNOWLEDGE_ARCHIVE_MAX_ENTRIES = 5
    error, _, _ = refuse(users, workspaces, "many.docx", make_docx(paragraphs=["x"]))
    assert error.startswith("many.docx: refused: the archive holds ") and "(at most 5)" in error
    settings.KNOWLEDGE_ARCHIVE_MAX_ENTRIES = 2000
    error, _, _ = refuse(users, workspaces, "dense.docx", docx_bomb(20))  # 20 MB: under the size limit
    assert error.startswith("dense.docx: refused: it expands ") and "times when unpacked (at most 100)" in error


@pytest.mark.django_db
def test_a_pdf_bomb_is_refused_within_the_cpu_limit(workspaces, users, tight):
    bomb = pdf_bomb(pages=8, page_mb=60)  # 480 MB of content streams
    assert len(bomb) < 3 * 1024 * 1024
    error, elapsed, grown = refuse(users, workspaces, "bomb.pdf", bomb)
    assert error in (
        "bomb.pdf: refused: reading it needed more than 4 s of CPU time (KNOWLEDGE_PARSE_CPU_S) — a decompression bomb?",
        "bomb.pdf: refused: reading it needed more than 300 MB of memory (KNOWLEDGE_PARSE_MEMORY_MB) — a decompression bomb?",
    ), error
    assert elapsed < 20 and grown < PARENT_GROWTH_KB


@pytest.mark.django_db
def test_deeply_nested_html_is_refused(workspaces, users, tight):
    error, elapsed, grown = refuse(users, workspaces, "deep.html", html_bomb(2_000_000))
    assert error in (
        "deep.html: refused: reading it needed more than 4 s of CPU time (KNOWLEDGE_PARSE_CPU_S) — a decompression bomb?",
        "deep.html: refused: reading it needed more than 300 MB of memory (KNOWLEDGE_PARSE_MEMORY_MB) — a decompression bomb?",
    ), error
    assert elapsed < 20 and grown < PARENT_GROWTH_KB


@pytest.mark.django_db
def test_the_wall_clock_limit_ends_a_slow_parse(workspaces, users, tight):
    tight.KNOWLEDGE_PARSE_CPU_S = 60
    tight.KNOWLEDGE_PARSE_TIMEOUT_S = 1.5
    error, elapsed, _ = refuse(users, workspaces, "slow.pdf", pdf_bomb(pages=4, page_mb=60))
    assert error == "slow.pdf: refused: reading it took longer than 1.5 s (KNOWLEDGE_PARSE_TIMEOUT_S) — a decompression bomb?"
    assert elapsed < 10


@pytest.mark.django_db
def test_the_celery_task_refuses_a_bomb(workspaces, users):
    from knowledge.tasks import import_upload_task

    u = knowledge_upload_create(user=users["alice"], workspace=workspaces["demo"], filename="b.docx", data=docx_bomb(400))
    import_upload_task.apply(args=[str(u.pk)])
    u.refresh_from_db()
    assert u.status == "failed" and "expands to 401 MB" in u.error


def _parse_in_daemon(queue):
    from knowledge import parse_guard

    limits = parse_guard.Limits(archive_max_bytes=10**8, archive_max_entries=2000, archive_max_ratio=100,
                                memory_mb=1024, cpu_s=30, timeout_s=60, max_chars=1_000_000)
    queue.put(parse_guard.parse(".docx", make_docx(heading="Daemon", paragraphs=["Parsed from a worker."]), limits))


def test_parsing_works_from_a_daemonic_worker_process():
    """Celery's prefork pool runs tasks in daemonic processes, which multiprocessing forbids
    to have children; the parse process is a plain subprocess, so it works there."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    worker = ctx.Process(target=_parse_in_daemon, args=(queue,), daemon=True)
    worker.start()
    title, text = queue.get(timeout=60)
    worker.join(10)
    assert title == "Daemon" and "Parsed from a worker." in text
