"""shared/cases/platform/03 over a real server: the client's TCP connection drops mid-run
(no websocket close frame). The run continues, the full answer is persisted with usage,
and the server logs no repeating exceptions."""

from __future__ import annotations

import json
import socket
import time

from . import flows


def test_abrupt_tcp_drop_mid_run(embedded_platform):
    platform = embedded_platform
    token = flows.login_token(platform, "alice")
    thread_id = flows.create_thread(platform, token)
    with flows.ws_connect(platform, thread_id, token=token) as ws:
        ws.send(json.dumps({"type": "message.send", "content": flows.QUESTION}))
        deltas = 0
        while deltas < 3:
            if flows.recv_json(ws)["type"] == "text.delta":
                deltas += 1
        ws.socket.shutdown(socket.SHUT_RDWR)  # the network goes away: no close frame
        ws.socket.close()

    deadline = time.monotonic() + 60
    while True:
        msgs = flows.messages(platform, token, thread_id)
        final = [m for m in msgs if m["role"] == "assistant"]
        if final and final[-1]["status"] != "streaming" and len(final) >= 2:
            break
        assert time.monotonic() < deadline, msgs
        time.sleep(0.2)
    answer = final[-1]
    assert answer["status"] == "complete"
    assert flows.WITH_TOPIC_TITLE in answer["content"] and answer["usage"]
    time.sleep(0.5)
    log = (platform.tmpdir / "daphne.log").read_text(errors="replace")
    assert log.count("Traceback") == 0, log[-3000:]
