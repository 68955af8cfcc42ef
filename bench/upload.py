"""Upload benchmark: knowledge files through the real HTTP path into the executor.

Starts the platform as a subprocess (``tests/e2e/harness.Platform``, embedded mode by
default; ``--services`` for PostgreSQL + Redis + a Celery worker), signs in as alice with an
API token, and times, from the first byte sent to the moment every upload reports done
(``GET /api/v1/knowledge/uploads/{id}/`` polled every 50 ms, as the page polls):

* one 20-page PDF (40 lines of Python Language Reference text per page, ~60 KB of text);
* 100 small Markdown files (~1.5 KB each), three uploads in flight at a time, like the page.

Prints seconds per case and the resulting item counts. Run: ``.venv/bin/python bench/upload.py``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pydoc_data.topics import topics  # noqa: E402

import httpx  # noqa: E402

from tests.e2e.harness import Platform  # noqa: E402
from tests.fakes.documents import make_pdf  # noqa: E402

PARALLEL = 3


def corpus_lines() -> list[str]:
    text = " ".join(" ".join(t.split()) for t in topics.values())
    latin = text.encode("latin-1", "ignore").decode("latin-1")
    return textwrap.wrap(latin, 90)


def wait_done(client: httpx.Client, upload_id: str) -> dict:
    while True:
        body = client.get(f"/api/v1/knowledge/uploads/{upload_id}/").json()
        if body["done"]:
            return body
        time.sleep(0.05)


def upload(client: httpx.Client, name: str, data: bytes) -> dict:
    response = client.post("/api/v1/knowledge/uploads/", files={"file": (name, data)}, data={"workspace": "demo"})
    response.raise_for_status()
    return wait_done(client, response.json()["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", action="store_true", help="PostgreSQL + Redis + Celery instead of embedded")
    args = parser.parse_args()
    lines = corpus_lines()
    pdf = make_pdf([lines[p * 40:(p + 1) * 40] for p in range(20)], title="Bench reference (20 pages)")
    notes = [(f"note-{i:03}.md", (f"# Bench note {i}\n\n" + "\n".join(lines[2000 + i * 15:2000 + i * 15 + 15])).encode())
             for i in range(100)]
    with Platform("services" if args.services else "embedded") as platform:
        token = httpx.post(f"{platform.base_url}/api/v1/auth/token/",
                           data={"username": "alice", "password": platform.password}).json()["token"]
        headers = {"Authorization": f"Token {token}"}
        with httpx.Client(base_url=platform.base_url, headers=headers, timeout=120) as client:
            started = time.perf_counter()
            result = upload(client, "reference.pdf", pdf)
            pdf_s = time.perf_counter() - started
            assert result["status"] == "created", result
            print(f"20-page PDF ({len(pdf) / 1024:.0f} KB): {pdf_s:.2f} s upload → item")

            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
                results = list(pool.map(lambda f: upload(client, *f), notes))
            md_s = time.perf_counter() - started
            created = sum(r["status"] == "created" for r in results)
            print(f"100 Markdown files ({sum(len(d) for _, d in notes) / 1024:.0f} KB, {PARALLEL} in flight): "
                  f"{md_s:.2f} s, {created} created, {md_s / len(notes) * 1000:.0f} ms per file")


if __name__ == "__main__":
    main()
