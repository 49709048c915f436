"""pigeon-tui: the operator terminal UI (``pigeon-tui``, entry point ``pigeond_tui.app:main``).

The folder ``tui/`` holds this package; it installs as ``pigeond_tui``, a name
of ours, not the generic ``tui`` other distributions also install.
"""
