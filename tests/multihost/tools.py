"""Test-only tool for the multi-host faults, loaded with ``EXTRA_TOOL_MODULES``.

``counted_write`` tells the side-effect counter (``MH_COUNTER_URL``, an HTTP server in the test
process, reached over the hosts' network like any outside service) that it ran, then sleeps
``seconds``: a test loses the worker's host meanwhile and counts how often the effect happened.
"""

import os
import time
import urllib.request

from agents.tools import tool


@tool(
    name="counted_write",
    description="Write a line to the counter, slowly (test tool).",
    risk="write",
    default_approval="never",
    default_roles=("member", "admin"),
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["text"],
    },
)
def counted_write(*, ctx, text: str, seconds: float = 0.0) -> dict:
    request = urllib.request.Request(os.environ["MH_COUNTER_URL"], data=text.encode(), method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        response.read()
    time.sleep(seconds)
    return {"written": text}
