"""The client process of bench/pg_driver_table.py: one variant, measured in a process of
its own (``python -m bench.pg_driver_table --child threads|asyncio``), since each installs
its own reactor.  It prints its figures as one JSON line; the runs in turns, the cluster
and the table are bench/pg_driver_table.py's.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from twisted.internet.defer import Deferred, gatherResults

from bench import harness
from bench.harness import Sizes

VARIANTS = ("threads", "asyncio")
CALLERS = 16
PAYLOAD = "x" * 500
WARMUP_CALLS = 50


@dataclass(frozen=True)
class Size(Sizes):
    calls: int = 5_000  # per scenario
    limit_s: float = 10.0  # per scenario


def schema(table: str) -> str:
    return (
        f"CREATE TABLE {table} (msg_id text PRIMARY KEY, from_session text NOT NULL,"
        " to_session text NOT NULL, kind text NOT NULL, payload text NOT NULL,"
        " created_at bigint NOT NULL, expires_at bigint NOT NULL)"
    )


def insert_sql(table: str) -> str:
    return (
        f"INSERT INTO {table} (msg_id, from_session, to_session, kind, payload, created_at,"
        " expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    )


def row(msg_id: str) -> tuple[str, str, str, str, str, int, int]:
    now = time.time_ns() // 1_000_000
    return (msg_id, "ses_sender", "ses_target", "chat", PAYLOAD, now, now + 86_400_000)


# -- the client process (one variant) ---------------------------------------------------------

Call = Callable[[], "Deferred[None]"]


@dataclass
class Budget:
    """Calls left and a deadline, shared by the callers of one window."""

    left: int
    deadline: float

    def take(self) -> bool:
        if self.left <= 0 or time.monotonic() >= self.deadline:
            return False
        self.left -= 1
        return True


@dataclass(frozen=True)
class Figures:
    calls: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p95_ms: float
    cpu_us: float  # client process CPU per call


async def caller(call: Call, budget: Budget, latencies: list[float]) -> None:
    while budget.take():
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)


async def window(calls: Sequence[Call], count: int, limit_s: float) -> Figures:
    """``calls``: one per caller, all at once; a warm-up, then the measured window."""
    warmup = Budget(WARMUP_CALLS, time.monotonic() + limit_s)
    await gatherResults([Deferred.fromCoroutine(caller(c, warmup, [])) for c in calls])
    latencies: list[float] = []
    budget = Budget(count, time.monotonic() + limit_s)
    cpu, started = time.process_time(), time.perf_counter()
    await gatherResults([Deferred.fromCoroutine(caller(c, budget, latencies)) for c in calls])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    done = max(len(latencies), 1)
    return Figures(
        calls=len(latencies),
        seconds=seconds,
        calls_per_s=len(latencies) / seconds,
        p50_ms=1e3 * harness.percentile(latencies, 0.5),
        p95_ms=1e3 * harness.percentile(latencies, 0.95),
        cpu_us=1e6 * cpu / done,
    )


def sync_transaction(conn: psycopg.Connection[Any], sql: str, msg_id: str) -> None:
    """pigeond's shape: an autocommit connection, explicit BEGIN and COMMIT."""
    conn.execute("BEGIN")
    conn.execute(sql, row(msg_id))
    conn.execute("COMMIT")


async def async_transaction(conn: psycopg.AsyncConnection[Any], sql: str, msg_id: str) -> None:
    await conn.execute("BEGIN")
    await conn.execute(sql, row(msg_id))
    await conn.execute("COMMIT")


async def threads_variant(reactor: Any, url: str, table: str, size: Size) -> dict[str, Figures]:
    from twisted.internet.threads import deferToThreadPool
    from twisted.python.threadpool import ThreadPool

    sql, ids = insert_sql(table), (f"t{n}" for n in itertools.count())
    conns = [psycopg.connect(url, autocommit=True, connect_timeout=10) for _ in range(CALLERS)]
    writer = ThreadPool(1, 1, name="writer")
    many = ThreadPool(CALLERS, CALLERS, name="callers")
    writer.start()
    many.start()

    def on(pool: ThreadPool, conn: psycopg.Connection[Any]) -> Call:
        return lambda: deferToThreadPool(reactor, pool, sync_transaction, conn, sql, next(ids))

    try:
        return {
            "sequential": await window([on(writer, conns[0])], size.calls, size.limit_s),
            "one_connection": await window(
                [on(writer, conns[0])] * CALLERS, size.calls, size.limit_s
            ),
            "own_connections": await window([on(many, c) for c in conns], size.calls, size.limit_s),
        }
    finally:
        writer.stop()
        many.stop()
        for conn in conns:
            conn.close()


async def asyncio_variant(reactor: Any, url: str, table: str, size: Size) -> dict[str, Figures]:
    def deferred(coro: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromFuture(asyncio.ensure_future(coro))

    sql, ids = insert_sql(table), (f"a{n}" for n in itertools.count())
    conns: list[psycopg.AsyncConnection[Any]] = [
        await deferred(psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10))
        for _ in range(CALLERS)
    ]
    lock = asyncio.Lock()

    async def locked(conn: psycopg.AsyncConnection[Any], msg_id: str) -> None:
        async with lock:  # one transaction at a time on the shared connection
            await async_transaction(conn, sql, msg_id)

    def on(conn: psycopg.AsyncConnection[Any]) -> Call:
        return lambda: deferred(async_transaction(conn, sql, next(ids)))

    def shared(conn: psycopg.AsyncConnection[Any]) -> Call:
        return lambda: deferred(locked(conn, next(ids)))

    try:
        return {
            "sequential": await window([on(conns[0])], size.calls, size.limit_s),
            "one_connection": await window([shared(conns[0])] * CALLERS, size.calls, size.limit_s),
            "own_connections": await window([on(c) for c in conns], size.calls, size.limit_s),
        }
    finally:
        for conn in conns:
            await deferred(conn.close())


def child(variant: str, url: str, table: str, size: Size, cpus: set[int]) -> None:
    """One variant in this process: install its reactor, measure, print JSON figures."""
    os.sched_setaffinity(0, cpus)  # before any thread: the pools inherit it
    if variant == "asyncio":
        from twisted.internet import asyncioreactor

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        asyncioreactor.install(loop)
    from twisted.internet import reactor as installed
    from twisted.internet.task import react

    reactor: Any = installed
    measure = threads_variant if variant == "threads" else asyncio_variant
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(schema(table))

    async def run(_: Any) -> None:
        found = await measure(reactor, url, table, size)
        print(json.dumps({k: asdict(v) for k, v in found.items()}), flush=True)

    try:
        react(lambda r: Deferred.fromCoroutine(run(r)))
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
