"""``manage.py import_knowledge``: formats, idempotency by (workspace, source path, content
hash), per-file errors that do not stop the rest."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from knowledge.importing import extract, extract_html
from knowledge.models import KnowledgeItem
from knowledge.selectors import knowledge_search

pytestmark = [pytest.mark.django_db, pytest.mark.db_backends]


def make_pdf(text: str) -> bytes:
    """A one-page PDF with a real text layer (Helvetica), built by hand."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


HTML = b"""<!doctype html><html><head><title>Backup policy</title><style>p{color:red}</style>
<script>var secretToken = "leak";</script></head><body><nav>Home | About</nav>
<h1>Backups</h1><p>Nightly <b>snapshots</b> are kept for 30 days.</p><p>Restores need two approvals.<br>Ask ops.</p>
</body></html>"""


@pytest.fixture
def docs(tmp_path):
    (tmp_path / "runbook.md").write_text("# Incident runbook\n\nPage the on-call engineer first.\n")
    (tmp_path / "notes.txt").write_text("Plain notes about the quarterly review.\n")
    (tmp_path / "guide.rst").write_text("Release guide\n=============\n\nTag the release, then publish wheels.\n")
    (tmp_path / "policy.html").write_bytes(HTML)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "handbook.pdf").write_bytes(make_pdf("Vacation requests go through the portal"))
    (tmp_path / "ignored.odt").write_bytes(b"not scanned: unsupported types in directories are skipped")
    return tmp_path


def run_import(*paths, **options):
    out, err = StringIO(), StringIO()
    call_command("import_knowledge", *map(str, paths), workspace="demo", stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def test_imports_every_format_then_is_idempotent(workspaces, users, docs):
    out, _ = run_import(docs, owner="alice", tag=["imported"])
    assert "5 created, 0 updated, 0 unchanged, 0 failed" in out
    titles = set(KnowledgeItem.objects.values_list("title", flat=True))
    assert titles == {"Incident runbook", "notes", "Release guide", "Backup policy", "handbook"}
    item = KnowledgeItem.objects.get(title="handbook")
    assert "Vacation requests go through the portal" in item.content
    assert item.owner == users["alice"] and item.tags == ["imported"] and item.type == "document"
    assert item.source_path.endswith("sub/handbook.pdf") and len(item.content_hash) == 64

    out, _ = run_import(docs)
    assert "0 created, 0 updated, 5 unchanged, 0 failed" in out
    assert KnowledgeItem.objects.count() == 5

    (docs / "notes.txt").write_text("Plain notes about the yearly offsite.\n")
    out, _ = run_import(docs)
    assert "0 created, 1 updated, 4 unchanged" in out
    hits = knowledge_search(workspace=workspaces["demo"], query="offsite")
    assert [h.title for h in hits] == ["notes"]
    assert knowledge_search(workspace=workspaces["demo"], query="quarterly") == []  # re-chunked


def test_a_failing_file_does_not_stop_the_rest(workspaces, docs):
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (docs / "empty.txt").write_text("   \n")
    err = StringIO()
    with pytest.raises(CommandError, match="3 of 8 file"):  # broken.pdf is named twice, imported once
        call_command("import_knowledge", str(docs / "broken.pdf"), str(docs), str(docs / "missing.md"),
                     workspace="demo", stdout=StringIO(), stderr=err)
    assert KnowledgeItem.objects.count() == 5
    report = err.getvalue()
    assert "broken.pdf: unreadable PDF" in report and "empty.txt: no text found" in report
    assert "missing.md: cannot read" in report


def test_unknown_workspace_is_an_error(db, docs):
    with pytest.raises(CommandError, match="no workspace"):
        call_command("import_knowledge", str(docs), workspace="nope", stdout=StringIO())


def test_html_extraction_keeps_paragraphs_and_drops_scripts():
    title, text = extract_html(HTML)
    assert title == "Backup policy"
    assert "secretToken" not in text and "color:red" not in text and "Home | About" not in text
    assert "Nightly snapshots are kept for 30 days." in text
    assert "\n\n" in text  # paragraphs stay paragraphs


def test_extract_rejects_unsupported_and_empty(tmp_path):
    from knowledge.importing import ImportFailed

    (tmp_path / "a.odt").write_bytes(b"x")
    (tmp_path / "b.md").write_text("")
    with pytest.raises(ImportFailed, match="unsupported"):
        extract(tmp_path / "a.odt")
    with pytest.raises(ImportFailed, match="no text"):
        extract(tmp_path / "b.md")
