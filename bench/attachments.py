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
attachment adds before the model is asked. Each is given as wall-clock seconds and as CPU
seconds of the platform's processes (``/proc``: web, worker, the parser subprocess; not the
shared PostgreSQL/Redis), which hold whatever else the machine runs. Prints seconds per case
(best of ``--repeat``).
Run: ``.venv/bin/python bench/attachments.py``.
"""

from __future__ import annotations

import argparse
import os
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


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(platform: Platform) -> float:
    """CPU seconds (user + system) the platform's processes have used, with their finished
    children (the document parser's subprocess): server work, whatever else the machine runs."""
    total = 0
    for proc in platform.procs.values():
        try:
            with open(f"/proc/{proc.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICK


def wait_run(client: httpx.Client, run_id: str) -> None:
    while client.get(f"/api/v1/runs/{run_id}/").json()["status"] in ("queued", "running"):
        time.sleep(0.05)


def one_case(platform, client: httpx.Client, fake: FakeOpenAI, clock: Clock, name: str | None, data: bytes | None):
    """``(upload s, send → model request s, upload CPU s, send CPU s)`` of one chat."""
    thread = client.post("/api/v1/threads/", json={"workspace": "demo", "provider": "openai"}).json()["id"]
    upload_s, upload_cpu, ids = 0.0, 0.0, []
    if data is not None:
        cpu, started = cpu_s(platform), time.perf_counter()
        response = client.post(f"/api/v1/threads/{thread}/attachments/", files={"file": (name, data)})
        upload_s, upload_cpu = time.perf_counter() - started, cpu_s(platform) - cpu
        response.raise_for_status()
        ids = [response.json()["id"]]
    fake.script(clock.responder)
    clock.event.clear()
    cpu, started = cpu_s(platform), time.perf_counter()
    run = client.post(f"/api/v1/threads/{thread}/runs/", json={"content": "What is in it?", "attachments": ids})
    run.raise_for_status()
    clock.event.wait(60)
    send_s, send_cpu = clock.arrived[-1] - started, cpu_s(platform) - cpu
    wait_run(client, run.json()["run_id"])
    return upload_s, send_s, upload_cpu, send_cpu


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
            one_case(platform, client, fake, clock, None, None)  # warm-up: first imports, first connections
            cases = [("no attachment", None, None),
                     (f"10 MB JPEG ({len(image) / 1024 / 1024:.1f} MB)", "photo.jpg", image),
                     (f"10 MB PNG ({len(png) / 1024 / 1024:.1f} MB)", "screen.png", png),
                     (f"50-page PDF ({len(pdf) / 1024:.0f} KB)", "reference.pdf", pdf)]
            results = {}
            for label, name, data in cases:
                runs = [one_case(platform, client, fake, clock, name, data) for _ in range(args.repeat)]
                results[label] = [min(r[i] for r in runs) for i in range(4)]
            base, base_cpu = results["no attachment"][1], results["no attachment"][3]
            print(f"mode: {'services' if args.services else 'embedded'}; best of {args.repeat}; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
            print(f"{'':28} {'wall clock':>47}   {'CPU of the platform processes':>44}")
            for label, (upload_s, send_s, upload_cpu, send_cpu) in results.items():
                added = upload_s + max(0.0, send_s - base)
                added_cpu = upload_cpu + max(0.0, send_cpu - base_cpu)
                print(f"{label:28} upload {upload_s:5.2f} s  send→model {send_s:5.2f} s  added {added:5.2f} s"
                      f"   upload {upload_cpu:5.2f} s  send→model {send_cpu:5.2f} s  added {added_cpu:5.2f} s")


if __name__ == "__main__":
    main()
