"""The session ids the agent-side clients accept, until pigeond.model declares them all.

One small module the daemon side can point at ``pigeond.model`` (``SESSION_ID_RE``,
``runtime_of``) once it has them: the clients use these names only.
"""

from __future__ import annotations

import re
from typing import Final

# A Claude Code session: the UUID exactly as Claude Code gives it (lowercase 8-4-4-4-12).
CLAUDE_SESSION_RE: Final = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
