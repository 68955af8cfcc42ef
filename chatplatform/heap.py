"""Start-up objects out of the garbage collector's way (``gc.freeze``)."""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()


def freeze_startup_heap() -> None:
    """Collect once, then move every object allocated so far — modules, classes, the SDKs'
    pydantic models — to the permanent generation, so a later full collection walks only what
    was allocated since. A worker holds hundreds of thousands of objects after start-up; a full
    (gen-2) collection of them takes hundreds of milliseconds, and every stream of the process
    waits for it. Call after a process's start-up imports (the ASGI
    application, ``preload_adapters``); calling again freezes what came since."""
    with _lock:
        gc.collect()  # start-up garbage is freed, not frozen
        gc.freeze()
