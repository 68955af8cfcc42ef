"""An OTLP/HTTP trace collector on ``127.0.0.1``: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` (protobuf, as the official exporter sends it) is decoded and
its spans kept in :attr:`FakeCollector.spans` (``{"trace_id", "span_id", "parent_id",
"name", "attributes"}``). ``base_url`` is the endpoint to configure
(``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

from __future__ import annotations

import gzip
import threading

from ._loopback import BaseHandler, ConnectionDropped, FakeServer


class _Handler(BaseHandler):
    server_version = "FakeOTLP/1.0"

    def do_POST(self) -> None:  # noqa: N802
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        try:
            body = self.read_body()
            if self.path_only != "/v1/traces":
                self.send_json(404, {"error": "not found"})
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.fake.add(request)
            data = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.write(data)
        except ConnectionDropped:
            self.close_connection = True


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class FakeCollector(FakeServer):
    handler = _Handler
    name = "FakeOTLP"

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict] = []
        self._spans_lock = threading.Lock()

    def fallback_iteration(self):
        return None

    def add(self, request) -> None:
        spans = []
        for resource in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}.get("service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append({
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex(), "name": span.name, "service": service,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                    })
        with self._spans_lock:
            self.spans.extend(spans)

    def snapshot(self) -> list[dict]:
        with self._spans_lock:
            return list(self.spans)
