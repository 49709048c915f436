"""How a write call says what kind of write it is, for the writer thread's queue
(pigeond/storage/write_queue.py): a mark on the function itself, so that the call passed
to ``Database.write`` carries it and the storage package's modules need no thread or
reactor to wear it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_URGENT_MARK: Final = "_pigeond_urgent_write"
_SHARES_MARK: Final = "_pigeond_shares_commit"


def urgent(call: F) -> F:
    """Mark a write call as one a hand-off waits on: it goes before queued bookkeeping."""
    setattr(call, _URGENT_MARK, True)
    return call


def is_urgent(call: Callable[..., Any]) -> bool:
    return bool(getattr(call, _URGENT_MARK, False))


def shares_commit(call: F) -> F:
    """Mark a write call as bookkeeping that may share one transaction with the like
    calls queued next to it: it must do all its writing in the repository's write
    transactions (``RepositoryBase._write``), and nothing outside the database."""
    setattr(call, _SHARES_MARK, True)
    return call


def may_share_commit(call: Callable[..., Any]) -> bool:
    return bool(getattr(call, _SHARES_MARK, False))
