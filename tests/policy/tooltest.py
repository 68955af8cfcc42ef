"""Test-only tools and helpers for governance/approval tests.

``Toolbox`` registers tools (``registry.scoped``) whose behaviour a test scripts: return a
value, raise a transient error N times, sleep. Every execution is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from agents.tools import ToolError, make_spec, registry

OBJ = {"type": "object"}


@dataclass
class Behaviour:
    result: object = None
    fail_times: int = 0  # raise a transient (502) ToolError this many times first
    sleep_s: float = 0.0
    raises: Exception | None = None


@dataclass
class Toolbox:
    calls: list[tuple[str, dict]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # tools whose body returned
    behaviour: dict[str, Behaviour] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def func(self, name: str):
        def run(*, ctx, **args):
            with self.lock:
                self.calls.append((name, args))
                b = self.behaviour.setdefault(name, Behaviour())
                failing = b.fail_times > 0
                if failing:
                    b.fail_times -= 1
            if failing:
                raise ToolError("upstream answered HTTP 502", retryable=True)
            if b.raises is not None:
                raise b.raises
            if b.sleep_s:
                time.sleep(b.sleep_s)
            self.finished.append(name)
            return b.result if b.result is not None else {"ok": True, "tool": name, "args": args, "summary": f"{name} done"}

        return run

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


SPECS = [
    # name, risk, parameters, flags
    ("kb_lookup", "read", {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}, {}),
    ("report_view", "read", OBJ, {}),
    ("note_write", "write", {"type": "object", "properties": {"text": {"type": "string"}, "env_id": {"type": "string"}},
                             "required": ["text"]}, {"default_roles": ("member", "admin")}),
    ("records_purge", "dangerous", {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}}},
                                    "required": ["ids"]}, {"default_roles": ("member", "admin")}),
    ("scoped_echo", "read", {"type": "object", "properties": {"workspace_id": {"type": "integer"},
                                                              "user_id": {"type": "integer"}}}, {}),
    ("whoami", "read", OBJ, {"always_offered": True}),
]


def toolbox_specs(box: Toolbox):
    return [make_spec(name=n, description=f"test tool {n}", parameters=p, risk=r, func=box.func(n), **f)
            for n, r, p, f in SPECS]


def scoped_toolbox():
    box = Toolbox()
    return box, registry.scoped(*toolbox_specs(box))


def call(call_id: str, name: str, args) -> tuple[str, str, str]:
    return (call_id, name, args if isinstance(args, str) else json.dumps(args))
