"""pigeon-tui: the operator terminal UI."""
