"""PostgreSQL for the benches: a private cluster with durable commits, where its processes
run, what CPU they use, and pigeond's delivery rows read back from it.

Not run by itself; bench/backends_table.py uses it.  The cluster is the tests' own
(testkit/pg_cluster.py ``running_cluster``: initdb + pg_ctl in a temporary folder, as
``nobody`` when root, a Unix socket in that folder and 127.0.0.1 only), restarted with
PostgreSQL's durable defaults: the tests run it with ``fsync=off`` and
``synchronous_commit=off``, which no benchmark against SQLite's ``synchronous=FULL``
may do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg

from bench.handoff_rig import Row
from bench.harness import cpu_seconds, pin_tasks
from testkit.pg_cluster import PgCluster, running_cluster

# What the bench reads back from the cluster to show how it ran.
SETTINGS = ("fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers")


class DurableCluster(PgCluster):
    """The tests' cluster, started with PostgreSQL's defaults for durability: every
    commit waits for its WAL to be flushed (fsync, synchronous_commit, full_page_writes
    on), as every SQLite commit of pigeond waits for its fsync."""

    def _server_options(self) -> str:
        return (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1"
            " -c max_connections=200 -c fsync=on -c synchronous_commit=on"
            " -c full_page_writes=on"
        )

    def settings(self) -> dict[str, str]:
        """The settings of :data:`SETTINGS` as the running server has them."""
        out = self.psql("SELECT " + ", ".join(f"current_setting('{n}')" for n in SETTINGS))
        return dict(zip(SETTINGS, out.strip().split("|"), strict=True))

    @property
    def postmaster_pid(self) -> int:
        return int((self.root / "data" / "postmaster.pid").read_text().split()[0])

    def pids(self) -> list[int]:
        """The postmaster and every process it forked (backends, WAL writer, ...)."""
        top = self.postmaster_pid
        return [top, *children(top)]

    def pin(self, cpus: set[int]) -> None:
        """Every process of the cluster on ``cpus``; backends forked later inherit it."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                pin_tasks(pid, cpus)

    def cpu_seconds(self) -> float:
        """user + system CPU seconds of the cluster's processes now alive."""
        total = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
        return total

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new empty database for one run: its URL (the Unix socket); dropped after."""
        name = self.create_database()
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                found.append(int(entry))
    return found


@contextlib.contextmanager
def durable_cluster(
    cpus: set[int], kind: type[DurableCluster] = DurableCluster
) -> Iterator[DurableCluster]:
    """A private cluster (testkit/pg_cluster.py) restarted with durable commits (or the
    options of another ``kind``) and pinned to ``cpus``; stopped and removed afterwards by
    ``running_cluster``."""
    with running_cluster() as plain:
        plain.pg_ctl("stop", "-m", "fast")
        # the same folder, port and user; only the server's options differ
        cluster = kind(plain.root, plain.port, plain.bin, plain._as_user)
        cluster.pg_ctl("start")
        cluster.pin(cpus)
        yield cluster


def read_rows(url: str, msg_ids: Sequence[str]) -> dict[str, Row]:
    """The delivery rows of ``msg_ids`` in the PostgreSQL database at ``url``
    (bench/handoff_rig.py's ``read_rows`` reads SQLite's)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT msg_id, to_session, state, created_at, handed_off_at"
            " FROM swarm_messages WHERE msg_id = ANY(%s)",
            (list(msg_ids),),
        ).fetchall()
    return {r[0]: Row(*r) for r in rows}
