"""Attachment benchmark: the server work a 10 MB image and a 50-page PDF add before the model
request, through the real HTTP path.

Starts the platform as a subprocess (``tests/e2e/harness.Platform``, embedded mode; ``--services``
for PostgreSQL + Redis + a Celery worker) with its ``openai`` provider pointed at the fake
upstream (``tests/fakes/openai_server.py``; its model marked as reading images), signs in as
alice with an API token and measures, per case, in a fresh chat:

Cases: a 10 MB JPEG (a 12-megapixel photo's size), a 10 MB PNG (random pixels: nothing to
compress), a 50-page PDF with a text layer.

* **upload** — ``POST /api/v1/threads/{id}/attachments/`` from the first byte sent to the
  answer (the type check, the pixel check, decoding, thumbnail and model copy for the image;
  the hardened extraction in its subprocess for the PDF; the row written). This happens while
  the person types, before they press Send;
* **send → model request** — ``POST /api/v1/threads/{id}/runs/`` until the fake upstream has
  the model request in hand (the attachments read back, the image base64-encoded, the PDF's
  text as labelled context, the body sent), against the same for a message without files.

``added`` = upload + (send → model request − the same without files): the server work the
attachment adds before the model is asked. Prints seconds per case (best of ``--repeat``).
Run: ``.venv/bin/python bench/attachments.py``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pydoc_data.topics import topics  # noqa: E402

import httpx  # noqa: E402

from tests.e2e.harness import Platform  # noqa: E402
from tests.fakes.documents import make_pdf  # noqa: E402
from tests.fakes.images import noisy_jpeg, noisy_png  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, text_chunks  # noqa: E402

VISION = ("from agents.models import LLMModel, Provider\n"
          "LLMModel.objects.update_or_create(provider=Provider.objects.get(slug='openai'), name='fake-model',"
          " defaults={'supports_images': True})\n")


class Clock:
    """The fake upstream's view: when each model request arrived (its body read)."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        self.event = threading.Event()

    def responder(self, body: dict):
        self.arrived.append(time.perf_counter())
        self.event.set()
        return text_chunks("ok")


def pdf_pages(n: int) -> bytes:
    text = " ".join(" ".join(t.split()) for t in topics.values())
    lines = textwrap.wrap(text.encode("latin-1", "ignore").decode("latin-1"), 90)
    return make_pdf([lines[p * 45:(p + 1) * 45] for p in range(n)], title=f"Bench reference ({n} pages)")


def wait_run(client: httpx.Client, run_id: str) -> None:
    while client.get(f"/api/v1/runs/{run_id}/").json()["status"] in ("queued", "running"):
        time.sleep(0.05)


def one_case(client: httpx.Client, fake: FakeOpenAI, clock: Clock, name: str | None, data: bytes | None):
    thread = client.post("/api/v1/threads/", json={"workspace": "demo", "provider": "openai"}).json()["id"]
    upload_s, ids = 0.0, []
    if data is not None:
        started = time.perf_counter()
        response = client.post(f"/api/v1/threads/{thread}/attachments/", files={"file": (name, data)})
        upload_s = time.perf_counter() - started
        response.raise_for_status()
        ids = [response.json()["id"]]
    fake.script(clock.responder)
    clock.event.clear()
    started = time.perf_counter()
    run = client.post(f"/api/v1/threads/{thread}/runs/", json={"content": "What is in it?", "attachments": ids})
    run.raise_for_status()
    clock.event.wait(60)
    send_s = clock.arrived[-1] - started
    wait_run(client, run.json()["run_id"])
    return upload_s, send_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", action="store_true", help="PostgreSQL + Redis + Celery instead of embedded")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    image = noisy_jpeg(10 * 1024 * 1024)
    png = noisy_png(10 * 1024 * 1024)
    pdf = pdf_pages(50)
    clock = Clock()
    with FakeOpenAI(api_key="sk-bench") as fake, Platform(
        "services" if args.services else "embedded",
        extra_env={"OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url, "OPENAI_MODEL": "fake-model"},
    ) as platform:
        platform.manage("shell", "-c", VISION)
        token = httpx.post(f"{platform.base_url}/api/v1/auth/token/",
                           data={"username": "alice", "password": platform.password}).json()["token"]
        with httpx.Client(base_url=platform.base_url, headers={"Authorization": f"Token {token}"},
                          timeout=120) as client:
            one_case(client, fake, clock, None, None)  # warm-up: first imports, first connections
            cases = [("no attachment", None, None),
                     (f"10 MB JPEG ({len(image) / 1024 / 1024:.1f} MB)", "photo.jpg", image),
                     (f"10 MB PNG ({len(png) / 1024 / 1024:.1f} MB)", "screen.png", png),
                     (f"50-page PDF ({len(pdf) / 1024:.0f} KB)", "reference.pdf", pdf)]
            results = {}
            for label, name, data in cases:
                runs = [one_case(client, fake, clock, name, data) for _ in range(args.repeat)]
                results[label] = (min(r[0] for r in runs), min(r[1] for r in runs))
            base = results["no attachment"][1]
            print(f"mode: {'services' if args.services else 'embedded'}; best of {args.repeat}")
            for label, (upload_s, send_s) in results.items():
                added = upload_s + max(0.0, send_s - base)
                print(f"{label:28} upload {upload_s:6.2f} s   send → model request {send_s:6.2f} s"
                      f"   added before the model request {added:6.2f} s")


if __name__ == "__main__":
    main()
