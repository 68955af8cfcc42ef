"""One recorded agent run, side by side: what the Hermes gateway sent and what our websocket
delivered, plus the latency the platform adds per text delta (issue 12).

Starts the real Hermes agent gateway (hermes-agent 0.19 in its cached venv, see
tests/agent_backend/hermes.py) on a scripted model, a recording proxy in front of the
gateway's Runs API, and the platform in embedded mode (tests/e2e/harness.py) with
``HERMES_API_BASE`` pointing at the proxy, so ``seed_demo`` registers provider ``hermes``.
An admin sends one message over the websocket; the model runs one ``terminal`` command and
then streams an answer of ``--deltas`` pieces, one every ``--interval-ms``.

Prints a merged timeline (ms since the message was sent): ``remote`` rows are the gateway's
SSE events as they passed the proxy (and the ``POST /v1/runs`` that started the run), ``ws``
rows the websocket events. Then, per remote
``message.delta``: added latency = the time the websocket delivered its last character −
the time the delta passed the proxy (p50/p90/max), and the same from the event's own
``timestamp`` (taken by the gateway when it queued the event). The deltas are matched by
character offset, so coalesced websocket deltas count for every remote delta they carry.

Usage: ``.venv/bin/python bench/agent_runs_latency.py [--deltas 60] [--interval-ms 50]``.
Numbers go to stdout; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.agent_backend.hermes import HermesGateway, ensure_hermes  # noqa: E402
from tests.e2e import flows  # noqa: E402
from tests.e2e.harness import Platform  # noqa: E402
from tests.fakes.agent_model import AgentModel  # noqa: E402
from tests.fakes.openai_server import text_chunks, tool_call_chunks  # noqa: E402

RECORD: list[tuple[float, dict]] = []  # (time.time() when the line passed the proxy, event)


def recording_proxy(target: str) -> tuple[ThreadingHTTPServer, str]:
    """An HTTP proxy to ``target`` (the gateway root) that records SSE ``data:`` events."""

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _forward(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
            url = target + self.path
            if self.path.endswith("/events"):
                with httpx.stream(method, url, headers=headers, timeout=None) as r:
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("content-type", "text/event-stream"))
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            RECORD.append((time.time(), json.loads(line[6:])))
                        data = (line + "\n").encode()
                        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                return
            asked = time.time()
            r = httpx.request(method, url, content=body, headers=headers, timeout=30)
            if self.path.endswith("/runs"):  # when the remote run was started, and how fast
                RECORD.append((asked, {"event": f"{method} {self.path} → {r.status_code} "
                                                f"in {(time.time() - asked) * 1000:.1f} ms"}))
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(r.content)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(r.content)

        def do_GET(self):  # noqa: N802
            self._forward("GET")

        def do_POST(self):  # noqa: N802
            self._forward("POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def short(event: dict) -> str:
    kind = event.get("event") or event.get("type")
    for key in ("delta", "preview", "arguments_summary", "output", "summary", "status", "tool", "name"):
        if key in event and event[key] not in (None, ""):
            value = event[key] if isinstance(event[key], str) else json.dumps(event[key])
            return f"{kind} {key}={value[:40]!r}"
    return str(kind)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=60)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    args = parser.parse_args()

    answer = "".join(f"w{n} " for n in range(args.deltas)).strip()
    model = AgentModel(api_key="sk-bench").start()
    model.script(
        tool_call_chunks([("call_1", "terminal", json.dumps({"command": "uname -s"}))]),
        text_chunks(answer, pieces=args.deltas),
    )
    model.delay_s = args.interval_ms / 1000
    home = Path(tempfile.mkdtemp(prefix="bench-hermes-"))
    gateway = HermesGateway(ensure_hermes(), home, model_base_url=model.base_url, model_key="sk-bench").start()
    proxy, proxy_url = recording_proxy(f"http://127.0.0.1:{gateway.port}")
    platform = Platform("embedded", extra_env={"HERMES_API_KEY": gateway.key, "HERMES_API_BASE": proxy_url + "/v1"})
    received: list[tuple[float, dict]] = []
    try:
        platform.start()
        token = flows.login_token(platform, "admin")
        thread_id = flows.create_thread(platform, token, provider="hermes")
        with flows.ws_connect(platform, thread_id, token=token) as ws:
            sent_at = time.time()
            ws.send(json.dumps({"type": "message.send", "content": "what kernel is this?"}))
            while True:
                event = flows.recv_json(ws, timeout=120)
                received.append((time.time(), event))
                if event["type"] in flows.TERMINAL:
                    break
    finally:
        platform.stop()
        gateway.cleanup()
        proxy.shutdown()
        model.stop()

    print(f"# one recorded run: {args.deltas} deltas every {args.interval_ms:.0f} ms after one terminal call")
    print(f"{'ms':>8}  {'remote (gateway SSE, at the proxy)':<58}  ws (our websocket)")
    rows = [(t, "remote", e) for t, e in RECORD] + [(t, "ws", e) for t, e in received]
    for t, side, event in sorted(rows, key=lambda r: r[0]):
        ms = (t - sent_at) * 1000
        text = short(event)
        print(f"{ms:8.1f}  {text:<58}  " if side == "remote" else f"{ms:8.1f}  {'':<58}  {text}")

    # Added latency per remote delta, matched by character offset.
    ws_deltas, offset = [], 0
    for t, event in received:
        if event["type"] == "text.delta":
            offset += len(event["delta"])
            ws_deltas.append((offset, t))
    via_proxy, via_stamp, offset = [], [], 0
    for t, event in RECORD:
        if event.get("event") != "message.delta":
            continue
        offset += len(event["delta"])
        delivered = next((wt for end, wt in ws_deltas if end >= offset), None)
        if delivered is not None:
            via_proxy.append((delivered - t) * 1000)
            via_stamp.append((delivered - float(event["timestamp"])) * 1000)
    ws_count = sum(1 for _, e in received if e["type"] == "text.delta")
    print(f"\nremote message.delta events: {len(via_proxy)}; websocket text.delta events: {ws_count}")
    for name, values in (("added latency per delta, proxy → websocket", via_proxy),
                         ("latency per delta, gateway timestamp → websocket", via_stamp)):
        if values:
            print(f"{name}: p50 {statistics.median(values):.1f} ms, p90 {pct(values, 0.9):.1f} ms, "
                  f"max {max(values):.1f} ms")
    final = [e for _, e in received if e["type"] in flows.TERMINAL][-1]
    print(f"terminal event: {final['type']}")


if __name__ == "__main__":
    main()
