"""The scripted model behind a real Hermes agent gateway (tests/agent_backend).

:class:`AgentModel` is :class:`~tests.fakes.openai_server.FakeOpenAI` with one difference
that the Hermes agent needs: besides its streamed, tool-calling turns, Hermes makes extra
*non-streamed, tool-less* completions per turn (a title, a summary). Those are answered
with :attr:`AgentModel.side_reply` and do **not** consume a scripted iteration, so a script
of streamed turns stays in order however many side requests the agent makes. Every request
is still recorded (``requests``); ``streamed_requests`` lists the streamed ones only.

Hermes also probes the base URL (``/api/v1/models``, ``/api/tags``, ``/v1/props``,
``/props``, ``/version``) to guess the server kind: those answer 404, as an OpenAI server
does.
"""

from __future__ import annotations

import json
import threading
import time

from tests.fakes.openai_server import FakeOpenAI, _Handler, _Server

__all__ = ["AgentModel"]


class _AgentModelHandler(_Handler):
    server_version = "FakeAgentModel/1.0"

    def _chat_completions(self, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if isinstance(body, dict) and not body.get("stream"):
            fake = self.fake
            fake._record(body, {k.lower(): v for k, v in self.headers.items()})
            if not self._authorized():
                return
            model = body.get("model") if isinstance(body.get("model"), str) else fake.models[0]
            self._send_json(200, {
                "id": "chatcmpl-side", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": fake.side_reply, "refusal": None}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })
            return
        super()._chat_completions(raw)


class AgentModel(FakeOpenAI):
    """A scripted model for an agent: streamed requests take the script in order;
    non-streamed ones get ``side_reply`` (default ``"ok"``)."""

    side_reply = "ok"

    @property
    def streamed_requests(self) -> list[dict]:
        return [r for r in self.requests if r.get("stream")]

    def start(self) -> AgentModel:
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", 0), _AgentModelHandler)
        server.fake = self
        host, port = server.server_address[:2]
        self._server = server
        self._base_url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"AgentModel:{port}", daemon=True)
        self._thread.start()
        return self
