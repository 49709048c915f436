"""A job with ``start()`` and ``stop()`` as a service of the daemon's ``MultiService``.

The pruner and the database watch keep their own state and loops; this adapter is what
the ``MultiService`` starts and stops, so neither job subclasses Twisted's ``Service``
(whose private names a subclass's own would shadow: see pigeond/twisted_internals.py).
"""

from __future__ import annotations

from typing import Protocol

from twisted.application.service import Service


class Job(Protocol):
    """Something that runs from ``start()`` until ``stop()``."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class JobService(Service):
    """Starts ``job`` when the service starts and stops it when the service stops."""

    def __init__(self, name: str, job: Job) -> None:
        self.job = job
        self.name = name

    def startService(self) -> None:
        Service.startService(self)
        self.job.start()

    def stopService(self) -> None:
        Service.stopService(self)
        self.job.stop()
