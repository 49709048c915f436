"""Clients that run inside or beside the coding agents (Claude Code's hooks, ``pigeon-mcp``,
the installers' files and the skill): stdlib HTTP to the daemon, like the CLIs; no daemon
layer, no Twisted."""
