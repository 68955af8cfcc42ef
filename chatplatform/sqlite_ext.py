"""SQLite with loadable extensions for Django's SQLite backend (sqlite-vec, knowledge/vectors.py).

Python builds without ``--enable-loadable-sqlite-extensions`` (pyenv's default, this
project's CI machines) have no ``Connection.enable_load_extension``. There the stdlib
``sqlite3`` module is replaced, before Django's SQLite backend first imports it, by
``pysqlite3`` (the ``pysqlite3-binary`` wheel: the same DB-API module compiled with a recent
SQLite and extension loading). Called from the settings; a no-op where the stdlib module can
load extensions or pysqlite3 is not installed (vector search then reports itself unavailable
and search answers by keywords)."""

from __future__ import annotations

import sys


def use_sqlite_with_extensions() -> str:
    """Returns which module serves ``sqlite3``: ``"stdlib"`` or ``"pysqlite3"``."""
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return "stdlib"
    try:
        import pysqlite3
        import pysqlite3.dbapi2
    except ImportError:
        return "stdlib"
    sys.modules["sqlite3"] = pysqlite3
    sys.modules["sqlite3.dbapi2"] = pysqlite3.dbapi2
    return "pysqlite3"
