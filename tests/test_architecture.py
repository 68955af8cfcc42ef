"""The import graph's shape, beside the contracts ``lint-imports`` checks (``.importlinter``):
no module of the product takes part in an import circle, imports inside functions counted
(grimp reads every import statement, wherever it stands)."""

from __future__ import annotations

import grimp
import networkx as nx

PACKAGES = ("config", "chatplatform", "llm", "chat", "agents", "mcp_client", "knowledge", "openai_api", "usage",
            "sso", "apikeys", "sharing", "prompts")


def _graph() -> nx.DiGraph:
    imports = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    graph = nx.DiGraph()
    for module in imports.modules:
        if ".migrations" in module:
            continue
        graph.add_node(module)
        for target in imports.find_modules_directly_imported_by(module):
            if ".migrations" not in target:
                graph.add_edge(module, target)
    return graph


def test_no_import_circle_counting_imports_inside_functions():
    graph = _graph()
    assert graph.number_of_nodes() > 200  # the whole product was read
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == [], f"modules importing each other in a circle: {circles}"


def test_provider_adapters_use_no_database():
    """``llm`` may read Django's settings, never the ORM (a row and its key are handed in)."""
    imports = grimp.build_graph("llm", include_external_packages=True, cache_dir=None)
    lines = [detail["line_contents"] for module in imports.modules if module.startswith("llm")
             for detail in imports.get_import_details(importer=module, imported="django")]
    assert lines  # the check can see Django imports at all
    assert [line for line in lines if line != "from django.conf import settings"] == []
