"""Provider capabilities: every kind is declared once, the declarations match the adapters,
and nothing outside ``llm/`` branches on ``provider.kind``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.models import Provider
from llm.capabilities import CAPABILITIES, NO_ADAPTER, adapter_class, capabilities
from llm.wire import Wire

ROOT = Path(__file__).resolve().parents[2]
KIND_BRANCH = re.compile(r"\bprovider\w*\.kind\s*(==|!=|\bin\b|\bnot in\b)|Provider\.Kind\.[A-Z_]+")


def test_every_kind_is_declared_or_has_no_adapter():
    assert set(CAPABILITIES) <= set(Provider.Kind.values)
    for kind in Provider.Kind.values:
        caps = capabilities(Provider(kind=kind))
        assert caps is CAPABILITIES.get(kind, NO_ADAPTER)
    agent = capabilities(Provider(kind="agent_runs"))
    assert agent.available and not agent.adapter and callable(agent.health_probe())  # served by a backend
    assert capabilities(None) is NO_ADAPTER


@pytest.mark.parametrize("kind", sorted(k for k, c in CAPABILITIES.items() if c.adapter))
def test_declared_capabilities_match_the_adapter_class(kind):
    caps = CAPABILITIES[kind]
    cls = adapter_class(caps)
    assert callable(getattr(cls, "from_provider", None)) and callable(getattr(cls, "stream", None))
    assert hasattr(cls, "list_models") == caps.lists_models
    assert hasattr(cls, "model_info") == caps.model_details
    if caps.shares_client:  # every shared (HTTP) adapter uses the one stream/error/finish plumbing
        for name in ("build_body", "open", "items", "reader", "close", "failure", "prefilled_thinking"):
            assert callable(getattr(cls, name, None)), (kind, name)
        # ... and can be read on the event loop (wire.arelay: the same reader, the async client)
        for name in ("aopen", "aitems", "aclose"):
            assert callable(getattr(cls, name, None)), (kind, name)
        assert {"think_tags", "unfinished"} <= set(dir(cls)) and Wire is not None


def test_no_kind_branches_outside_the_providers_package():
    offenders = []
    for app in ("agents", "chat", "knowledge", "chatplatform"):
        for path in (ROOT / app).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("llm/", "agents/migrations/")):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if KIND_BRANCH.search(line):
                    offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


def test_preloading_the_adapters_freezes_the_start_up_heap():
    # The SDKs' classes (about 490,000 objects in a worker) go to the permanent generation: a
    # full collection mid-stream walked them all, 345 ms in which every stream waited.
    import gc
    import sys

    from llm.capabilities import preload_adapters

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    preload_adapters()
    assert "openai.resources.chat" in sys.modules
    assert gc.get_freeze_count() > 100_000
    gc.unfreeze()
