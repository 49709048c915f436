"""Conversation brakes: judges that hold a send for a person.

A send is judged after its thread is known (pigeond/api/routes.py): each brake of the
daemon's ordered list (hops, then the pair brakes and the budget as they are added) is
asked in turn, and the first :class:`Hold` wins; the message is then stored held
(pigeond/storage/brake_holds.py) and the sender's 202 says why.  Consent is judged
apart, as before.  A brake reads what it needs through the database (off the reactor)
and takes a reload's settings through ``configure``; 0 turns an option's brake off.
"""

from pigeond.brakes.base import Brake, PersonPrompts, first_hold
from pigeond.brakes.hops import HopBrake
from pigeond.model import Hold

__all__ = ["Brake", "Hold", "HopBrake", "PersonPrompts", "first_hold"]
