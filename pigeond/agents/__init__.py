"""Clients that run beside the coding agents (Claude Code's hooks, the MCP tools' names and
skill): small, stdlib-only, and never the daemon's layers."""
