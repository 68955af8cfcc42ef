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

import time

from tests.fakes.openai_server import FakeOpenAI, _Handler

__all__ = ["AgentModel"]


class _AgentModelHandler(_Handler):
    server_version = "FakeAgentModel/1.0"

    def _chat_completions(self, body) -> None:
        """``body``: the parsed (and already recorded) JSON of the request."""
        if isinstance(body, dict) and not body.get("stream"):
            if not self._authorized():
                return
            fake = self.fake
            model = body.get("model") if isinstance(body.get("model"), str) else fake.models[0]
            self.send_json(200, {
                "id": "chatcmpl-side", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": fake.side_reply, "refusal": None}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })
            return
        super()._chat_completions(body)


class AgentModel(FakeOpenAI):
    """A scripted model for an agent: streamed requests take the script in order;
    non-streamed ones get ``side_reply`` (default ``"ok"``)."""

    handler = _AgentModelHandler
    side_reply = "ok"

    @property
    def streamed_requests(self) -> list[dict]:
        return [r for r in self.requests if r.get("stream")]
