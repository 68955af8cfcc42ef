"""Client-side Markdown while streaming: time from the first ``text.delta`` to rendered Markdown.

Loads the chat page's own modules (``templates/static/chat/app/live-text.js`` → markdown-it
+ DOMPurify + highlight.js, the committed vendor bundle) in the system Chromium (Playwright,
headless), served from a loopback HTTP server, and feeds a 5,000-token Markdown answer
(paragraphs, lists, a table, fenced Python code, inline citations) into the same ``LiveText``
the ``text.delta`` handler uses.

Prints, for each run (``--runs``):

* ``first_paint_ms`` — first delta → first rendered Markdown frame;
* ``burst_ms`` — the whole answer delivered at once, as a replay after a reload does
  (deltas of ``--delta-tokens`` tokens, one per task): first delta → the last character is
  on screen as Markdown;
* ``live_lag_ms`` — streamed at ``--rate`` tokens/s (for ``--live-seconds``): per frame, how
  long the oldest received text not yet on screen has waited (0 when all is drawn), p50/p95;
* ``render_ms`` — one full render of the finished 5,000-token answer, p50/p95 (the cost of
  one frame at the end of the stream).

Usage: ``.venv/bin/python bench/markdown_render.py [--tokens 5000] [--runs 5]``.
Numbers go to stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "templates" / "static"
CHROMIUM = "/usr/bin/chromium"

PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<div id="body"></div>
<script type="module">
import { LiveText } from "/chat/app/live-text.js";
import { renderInto } from "/chat/app/markdown.js";
window.bench = { LiveText, renderInto };
window.benchReady = true;
</script></body></html>"""

WORDS = ("the context manager enters and exits around the block so resources are released even when "
         "an exception propagates through the suite of statements").split()


def answer(tokens: int) -> list[str]:
    """~``tokens`` word-sized deltas of realistic Markdown (one token ≈ one word or symbol)."""
    out: list[str] = []
    n = 0
    section = 0
    while n < tokens:
        section += 1
        out.append(f"\n\n## Part {section}\n\n")
        for i in range(60):
            out.append(("**" + WORDS[i % len(WORDS)] + "** ") if i % 17 == 0 else WORDS[(i + section) % len(WORDS)] + " ")
            if i % 25 == 24:
                out.append(f"[{section % 8 + 1}]. ")
        out.append("\n\n- first point with `inline code`\n- second point\n- third point\n\n")
        out.append("| name | value |\n|---|---|\n| alpha | 1 |\n| beta | 2 |\n\n")
        out.append("```python\n")
        for line in ("with open(path) as fh:\n", "    for line in fh:\n", "        total += len(line)\n"):
            out.extend(tok + " " for tok in line.split(" "))
            out.append("\n")
        out.append("```\n")
        n = sum(len(t.split()) or 1 for t in out)
    return out


SCRIPT = """async ([deltas, perDelta, rate, liveSeconds]) => {
  const { LiveText, renderInto } = window.bench;
  const body = document.getElementById('body');
  const full = deltas.join('');
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  // 1. burst: everything at once (a replay), one task per delta.
  body.replaceChildren();
  let lt = new LiveText(body);
  const groups = [];
  for (let i = 0; i < deltas.length; i += perDelta) groups.push(deltas.slice(i, i + perDelta).join(''));
  const t0 = performance.now();
  let firstPaint = null;
  const watcher = new MutationObserver(() => { if (firstPaint === null) firstPaint = performance.now() - t0; });
  watcher.observe(body, {childList: true, subtree: true});
  // One task per delta, as websocket messages arrive (MessageChannel: no timer clamping).
  const channel = new MessageChannel();
  const nextTask = () => new Promise(r => { channel.port1.onmessage = () => r(); channel.port2.postMessage(0); });
  for (const g of groups) { lt.append(g); await nextTask(); }
  while (Number(body.dataset.renderedChars || 0) < full.length) await frame();
  const burst = performance.now() - t0;
  watcher.disconnect();
  // 2. live: at `rate` tokens/s, measure how far the rendered text lags the received text.
  body.replaceChildren(); delete body.dataset.renderedChars;
  lt = new LiveText(body);
  const lags = [];
  const start = performance.now();
  let sent = 0, receivedAt = [];
  const limit = Math.min(deltas.length, Math.round(rate * liveSeconds));
  // Each frame: how long ago arrived the oldest received text that is not on screen yet.
  const observe = () => {
    const shown = Number(body.dataset.renderedChars || 0);
    const now = performance.now();
    let oldest = null;
    for (const [len, at] of receivedAt) { if (len > shown) { oldest = at; break; } }
    lags.push(oldest === null ? 0 : now - oldest);
  };
  let streaming = true;
  const watch = () => { observe(); if (streaming) requestAnimationFrame(watch); };
  requestAnimationFrame(watch);
  await new Promise((resolve) => {
    const tick = () => {
      const due = Math.min(limit, Math.floor((performance.now() - start) / 1000 * rate));
      while (sent < due) { lt.append(deltas[sent]); receivedAt.push([lt.text.length, performance.now()]); sent++; }
      if (sent >= limit) resolve(); else setTimeout(tick, 5);
    };
    tick();
  });
  streaming = false;
  for (let i = 0; i < 3; i++) { await frame(); observe(); }
  // 3. one full render of the finished answer.
  const renders = [];
  for (let i = 0; i < 15; i++) { const a = performance.now(); renderInto(body, full); renders.push(performance.now() - a); }
  return {burst, firstPaint, lags, renders, chars: full.length};
}"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delta-tokens", type=int, default=8, help="tokens per text.delta in the burst")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s in the live phase")
    parser.add_argument("--live-seconds", type=float, default=6.0)
    args = parser.parse_args()

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/bench.html":
                data = PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            super().do_GET()

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(STATIC)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    deltas = answer(args.tokens)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{server.server_port}/bench.html")
        page.wait_for_function("() => window.benchReady === true")
        results = [page.evaluate(SCRIPT, [deltas, args.delta_tokens, args.rate, args.live_seconds])
                   for _ in range(args.runs)]
        browser.close()
    server.shutdown()
    bursts = [r["burst"] for r in results]
    firsts = [r["firstPaint"] for r in results]
    lags = [x for r in results for x in r["lags"]]
    renders = [x for r in results for x in r["renders"]]
    print(json.dumps({
        "tokens": args.tokens, "chars": results[0]["chars"], "deltas": len(deltas), "runs": args.runs,
        "first_paint_ms": {"p50": round(statistics.median(firsts), 1), "max": round(max(firsts), 1)},
        "burst_ms": {"p50": round(statistics.median(bursts), 1), "max": round(max(bursts), 1)},
        "live_lag_ms": {"rate_tok_s": args.rate, "p50": round(pct(lags, .5), 1), "p95": round(pct(lags, .95), 1)},
        "render_ms": {"p50": round(pct(renders, .5), 2), "p95": round(pct(renders, .95), 2)},
    }, indent=2))


if __name__ == "__main__":
    main()
