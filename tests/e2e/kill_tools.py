"""Test-only tools for the worker-kill test, loaded with EXTRA_TOOL_MODULES.

``slow_write`` appends one line to ``$KILL_TEST_LEDGER`` (so the test counts executions
across processes) and then sleeps ``seconds``: the test kills the worker while it sleeps.
"""

import os
import time

from agents.tools import tool


@tool(
    name="slow_write",
    description="Write a line, slowly (test tool).",
    risk="write",
    default_approval="never",
    default_roles=("member", "admin"),
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["text"],
    },
)
def slow_write(*, ctx, text: str, seconds: float = 0.0) -> dict:
    with open(os.environ["KILL_TEST_LEDGER"], "a") as fh:
        fh.write(f"{os.getpid()} {text}\n")
    time.sleep(seconds)
    return {"written": text}
