"""Real documents built in memory for import tests and the upload benchmark: PDFs with a
text layer (one Helvetica text object per line, several pages), password-protected PDFs
(pypdf's own encryption) and Word ``.docx`` files (python-docx)."""

from __future__ import annotations

import io


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]] | str, *, title: str = "") -> bytes:
    """A PDF whose pages carry the given lines as real text. ``pages`` is a list of pages,
    each a list of lines (or one string: a single one-line page)."""
    if isinstance(pages, str):
        pages = [[pages]]
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects: list[str] = ["<< /Type /Catalog /Pages 2 0 R >>",
                          f"<< /Type /Pages /Kids [{kids}] /Count {n} >>",
                          "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, lines in enumerate(pages):
        body = "BT /F1 11 Tf 14 TL 72 740 Td " + " ".join(f"({_escape(line)}) Tj T*" for line in lines) + " ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
                       "/Resources << /Font << /F1 3 0 R >> >> >>")
        objects.append(f"<< /Length {len(body.encode('latin-1'))} >>\nstream\n{body}\nendstream")
    info = len(objects) + 1
    objects.append(f"<< /Title ({_escape(title)}) >>" if title else "<< >>")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info} 0 R >>\n"
            f"startxref\n{xref}\n%%EOF\n").encode()
    return out


def encrypt_pdf(raw: bytes, *, user_password: str) -> bytes:
    """``raw`` re-written with AES-256 encryption needing ``user_password`` to open."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(raw)))
    writer.encrypt(user_password=user_password, owner_password=user_password + "-owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(*, title: str = "", heading: str = "", paragraphs: list[str] = (), table: list[list[str]] = ()) -> bytes:
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    if heading:
        document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
