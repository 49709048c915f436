"""Agent-side clients of pigeond: what runs inside or beside a coding agent (``pigeon-mcp``,
the MCP server Claude Code and Codex load).  Stdlib HTTP to the daemon, like the CLIs: no
daemon layer, no Twisted."""
