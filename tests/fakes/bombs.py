"""Decompression bombs and other parser-expensive files, built in memory for the tests:
small files that expand enormously (or take long) when parsed."""

from __future__ import annotations

import io
import zipfile
import zlib

from .documents import make_docx


def docx_bomb(unpacked_mb: int = 400) -> bytes:
    """A real Word document whose ``word/document.xml`` is replaced by ``unpacked_mb`` MB of
    one repeated paragraph (deflate packs it about 1000:1)."""
    base = zipfile.ZipFile(io.BytesIO(make_docx(paragraphs=["seed"])))
    out = io.BytesIO()
    paragraph = b"<w:p><w:r><w:t>all work and no play makes jack a dull boy</w:t></w:r></w:p>" * 1000
    head = (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>')
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bomb:
        for item in base.infolist():
            if item.filename != "word/document.xml":
                bomb.writestr(item, base.read(item.filename))
        info = zipfile.ZipInfo("word/document.xml")
        info.compress_type = zipfile.ZIP_DEFLATED
        with bomb.open(info, "w", force_zip64=True) as doc:
            doc.write(head)
            written = len(head)
            while written < unpacked_mb * 1024 * 1024:
                doc.write(paragraph)
                written += len(paragraph)
            doc.write(b"</w:body></w:document>")
    return out.getvalue()


def pdf_bomb(pages: int = 8, page_mb: int = 60) -> bytes:
    """A one-font PDF whose pages' FlateDecode content streams each inflate to ``page_mb`` MB
    of text-showing operators (``pages`` × ``page_mb`` MB in all, about 1000:1 packed)."""
    ops = b"BT /F1 12 Tf 72 720 Td " + b"(all work and no play makes jack a dull boy) Tj " * (page_mb * 1024 * 1024 // 48) + b"ET"
    stream = zlib.compress(ops, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(f"{4 + 2 * i} 0 R".encode() for i in range(pages))
        + f"] /Count {pages} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i in range(pages):
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n".encode() + stream + b"\nendstream")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{n} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for off in offsets:
        out.write(f"{off:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def html_bomb(depth: int = 2_000_000) -> bytes:
    """HTML nested ``depth`` ``<div>`` elements deep (``depth`` × 5 bytes)."""
    return b"<html><body>" + b"<div>" * depth + b"deep" + b"</div>" * 10 + b"</body></html>"
