"""An OpenAI-compatible embeddings endpoint speaking real HTTP on ``127.0.0.1``.

Meant as the base URL of the real ``openai`` SDK (``knowledge/embeddings.py``)::

    with FakeEmbeddings(dimensions=16) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test")
        client.embeddings.create(model="fake-embed", input=["a", "b"])

``POST /v1/embeddings`` answers ``{"object": "list", "data": [{"object": "embedding",
"index": i, "embedding": [...]}], "model", "usage"}``. Each vector is a deterministic bag of
words: every lower-cased word adds 1 to the dimension its CRC-32 picks (so texts sharing
words are near). ``max_chars``: an input longer than that is refused with 400 and OpenAI's
``context_length_exceeded`` error, as a real endpoint refuses too many tokens.
``fail_status``: every request is answered with that HTTP error (the endpoint broken).
``on_request(body)`` runs before answering; ``accepted`` lists the inputs answered with vectors.
"""

from __future__ import annotations

import re
import zlib

from ._loopback import BaseHandler, FakeServer

WORD = re.compile(r"\w+")


def bag_of_words(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in WORD.findall(text.lower()):
        vector[zlib.crc32(word.encode()) % dimensions] += 1.0
    if not any(vector):
        vector[0] = 1.0
    return vector


class _Handler(BaseHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = self.read_json()
        fake: FakeEmbeddings = self.fake
        if self.path_only != "/v1/embeddings":
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        if fake.fail_status:
            self.send_json(fake.fail_status, {"error": {"message": "fake failure", "type": "server_error"}})
            return
        if not isinstance(body, dict) or "input" not in body or "model" not in body:
            self.send_json(400, {"error": {"message": "model and input are required", "type": "invalid_request_error"}})
            return
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if fake.max_chars and any(len(t) > fake.max_chars for t in inputs):
            self.send_json(400, {"error": {
                "message": f"This model's maximum context length is {fake.max_chars} characters.",
                "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
            return
        if fake.on_request:
            fake.on_request(body)
        fake.accepted.extend(inputs)
        data = [{"object": "embedding", "index": i, "embedding": bag_of_words(t, fake.dimensions)}
                for i, t in enumerate(inputs)]
        self.send_json(200, {"object": "list", "data": data, "model": body["model"],
                             "usage": {"prompt_tokens": 1, "total_tokens": 1}})


class FakeEmbeddings(FakeServer):
    handler = _Handler
    url_suffix = "/v1"
    name = "FakeEmbeddings"

    def __init__(self, *, dimensions: int = 32, max_chars: int = 0, fail_status: int = 0, on_request=None) -> None:
        super().__init__()
        self.dimensions = dimensions
        self.max_chars = max_chars
        self.fail_status = fail_status
        self.on_request = on_request
        self.accepted: list[str] = []  # the inputs of the requests answered with vectors

    @property
    def inputs(self) -> list[str]:
        """Every input text received, in order."""
        out = []
        for body in self.requests:
            value = body.get("input", [])
            out.extend(value if isinstance(value, list) else [value])
        return out
