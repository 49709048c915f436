"""What the send path knows of a sender when it stores a message (no I/O: a 202 never
waits for a transcript).

A send a session's own pigeond tool made is found later in that session's transcript
(pigeond/delivery/sender_proof.py): until then its proof is ``pending`` and it is not
handed off.  A send from a person's shell says so (``"via": "terminal"``, which
``pigeon-send`` sets only at a terminal and outside an agent) and is ``person`` when the
kernel agrees (the Unix peer has a terminal and no agent above it).  Anything else is
``unverified`` at once, with the reason: a sender of no runtime whose transcript pigeond
reads, or a msg_id no pigeond tool makes (the tools' ids start with ``msg_tool_``, and the
opencode plugin's is derived from the call itself), so only a tool's send ever waits.
"""

from __future__ import annotations

from pigeond.api.callers import Caller
from pigeond.model import TOOL_MSG_ID_PREFIX, NewMessage, Runtime, SenderClaim, SenderProof
from pigeond.model import runtime_of as _runtime_of

# The runtimes whose members' transcripts pigeond reads (pigeond/tool_calls.py's readers).
READABLE_RUNTIMES = (Runtime.OPENCODE, Runtime.CLAUDE)


def readable_runtime(sender: str) -> Runtime | None:
    """The runtime of ``sender`` when pigeond can read its transcript, else None."""
    try:
        runtime = _runtime_of(sender)
    except ValueError:
        return None
    return runtime if runtime in READABLE_RUNTIMES else None


def sender_claim(
    message: NewMessage,
    caller: Caller | None,
    now_ms: int,
    timeout_ms: int,
) -> SenderClaim:
    """The proof ``message`` is stored with.  ``caller`` is given only when the send says
    it comes from a terminal (``via``): the kernel's view of that process."""
    sender = message.from_session
    if caller is not None:
        if caller.person:
            return SenderClaim(SenderProof.PERSON, f"sent from a terminal, {caller.describe()}")
        said = f"said it came from a terminal, but {caller.describe()} is no person's shell"
        return SenderClaim(SenderProof.UNVERIFIED, said)
    if readable_runtime(sender) is None:
        return SenderClaim(SenderProof.UNVERIFIED, f"{sender} has no transcript pigeond can read")
    if not message.msg_id.startswith(TOOL_MSG_ID_PREFIX):
        return SenderClaim(
            SenderProof.UNVERIFIED, f"not sent by a pigeond tool (a tool's msg_id starts with"
            f" {TOOL_MSG_ID_PREFIX})",
        )  # fmt: skip
    return SenderClaim(SenderProof.PENDING, None, now_ms + timeout_ms)
