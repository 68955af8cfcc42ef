"""The demo corpus: the Python Language Reference topics shipped with every CPython
(``pydoc_data.topics``: 79 topics, ~465 KB of real text)."""

from __future__ import annotations

from pydoc_data.topics import topics

from .models import KnowledgeItem
from .services import content_hash, knowledge_item_create, knowledge_item_update

SOURCE_PREFIX = "pydoc_data.topics/"


def topic_title(key: str, text: str) -> str:
    """The topic's own heading ("The "with" statement"), else its key."""
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    return (first or key).replace('"', "")[:300]


def import_python_reference(*, workspace, owner=None) -> tuple[int, int]:
    """Create or refresh one item per topic. Idempotent by (workspace, source path, content
    hash). Returns ``(created, updated)``."""
    created = updated = 0
    existing = {
        i.source_path: i for i in KnowledgeItem.objects.filter(workspace=workspace, source_path__startswith=SOURCE_PREFIX)
    }
    for key, text in topics.items():
        title = topic_title(key, text)
        path = SOURCE_PREFIX + key
        item = existing.get(path)
        if item is None:
            knowledge_item_create(
                workspace=workspace, owner=owner, title=title, content=text, type="reference",
                tags=["python", "language-reference"], source_path=path,
                url=f"https://docs.python.org/3/reference/#{key}",
            )
            created += 1
        elif item.content_hash != content_hash(title, text):
            knowledge_item_update(item=item, title=title, content=text)
            updated += 1
    return created, updated
