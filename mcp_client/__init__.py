"""MCP: external MCP servers as governed tool sources (client side) and the knowledge base
served as an MCP server (``/mcp/``). Uses the official ``mcp`` SDK for both sides.

* ``models``   — ``MCPServer`` (admin-managed connection settings + health) and ``MCPTool``
  (each discovered tool: its exposed name, its approved definition hash, quarantine).
* ``runtime``  — one long-lived initialised session per enabled server per process, on a
  background event loop; reconnect with backoff; blocking ``call()`` for tool threads.
* ``sync``     — the database side: discovered tools → ``MCPTool`` + ``ToolPolicy`` rows
  (safe defaults), drift quarantine, names, and the tool sources registered with
  ``agents.tools.tool_sources``.
* ``naming``   — exposed tool names (unique, provider-safe) — ``shared/cases/platform/05``.

The knowledge base's own MCP endpoint (``/mcp/``) lives in ``knowledge.mcp_server`` (agents
never imports knowledge).
"""
