"""Direct prompts vs delivery through pigeond, on the real opencode (run by hand).

    .venv/bin/python -m bench.delivery_table [--messages 8] [--delay 0.5]

For each pinned opencode version and each way of sending, the same load (the
messages spread over 4 senders, released together, each direct sender with its
own x-opencode-directory header) goes to one fresh session.  The table shows
the most main completions of that session in flight at once (more than 1 is
the parallel-turn bug), how many messages reached the transcript, duplicates,
and the turns (main completions) used.  Uses the end-to-end tests' opencode harness
(testkit/).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (
    BRAKES_OFF,
    GUARD_OFF,
    arguments,
    machine_line,
    markdown_table,
    parse,
    running,
    scratch_dir,
)
from testkit.daemon_process import DaemonProcess
from testkit.fake_llm import FakeLLM
from testkit.opencode_dist import OPENCODE_1_15, OPENCODE_1_18, ensure_opencode
from testkit.opencode_http import OpencodeError
from testkit.opencode_server import OpencodeServer

SENDERS = 4
SETTLE_S = 20.0
PAYLOAD = re.compile(r"bench payload (\d+)")


@dataclass
class Row:
    version: str
    way: str
    most_at_once: int
    found: int
    sent: int
    duplicates: int
    turns: int


def together(jobs: list[Callable[[], None]]) -> None:
    barrier = threading.Barrier(len(jobs))

    def run(job: Callable[[], None]) -> None:
        barrier.wait(timeout=10)
        job()

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def spread(n: int) -> list[list[int]]:
    return [list(range(i, n, SENDERS)) for i in range(SENDERS)]


def send_direct(server: OpencodeServer, session: str, n: int) -> None:
    dirs = list(server.dirs.values())

    def sender(i: int, numbers: list[int]) -> Callable[[], None]:
        def send() -> None:
            for k in numbers:
                server.prompt_async(session, dirs[i % len(dirs)], f"bench payload {k}")

        return send

    together([sender(i, nums) for i, nums in enumerate(spread(n))])


def send_via_pigeond(daemon: DaemonProcess, session: str, n: int) -> None:
    def sender(numbers: list[int]) -> Callable[[], None]:
        def send() -> None:
            for k in numbers:
                body = {"from": f"ses_bench{k % SENDERS}", "to": session,
                        "payload": f"bench payload {k}"}  # fmt: skip
                request = urllib.request.Request(
                    daemon.base_url + "/swarm/send", data=json.dumps(body).encode(),
                    method="POST", headers=daemon.auth_headers,
                )  # fmt: skip
                with urllib.request.urlopen(request, timeout=10) as response:
                    assert response.status == 202

        return send

    together([sender(nums) for nums in spread(n)])


def settle(server: OpencodeServer, llm: FakeLLM, session: str, n: int) -> None:
    """Until every payload is in the transcript and the session has stayed idle 2 s.

    1.15.4's parallel loops may never stop by themselves: after SETTLE_S they
    are aborted, once per directory.
    """
    llm.wait_for(lambda f: bool(f.completions("main", session)) or f.in_flight() > 0, 20)
    dirs = list(server.dirs.values())
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        found = {m for t in server.user_texts(session) for m in PAYLOAD.findall(t)}
        if len(found) >= n:
            break
        time.sleep(0.2)
    try:
        server.wait_idle(session, dirs, timeout_s=max(deadline - time.monotonic(), 1), settle_s=2)
    except OpencodeError:
        for directory in dirs:
            server.abort(session, directory)
        server.wait_idle(session, dirs, timeout_s=30)


def measure(
    version: str, way: str, server: OpencodeServer, llm: FakeLLM, session: str, n: int
) -> Row:
    counts = Counter(m for t in server.user_texts(session) for m in PAYLOAD.findall(t))
    return Row(
        version=version, way=way, most_at_once=llm.max_concurrent("main", session),
        found=len(counts), sent=n, duplicates=sum(c - 1 for c in counts.values()),
        turns=len(llm.completions("main", session)),
    )  # fmt: skip


def run_version(version: str, n: int, delay: float, work: Path) -> list[Row]:
    rows = []
    with FakeLLM(delay_s=delay) as llm:
        server = OpencodeServer(
            ensure_opencode(version), version=version, state_dir=work / version,
            llm_base_url=llm.base_url,
        )  # fmt: skip
        with server:
            directory = server.dirs["dirA"]
            ways: list[tuple[str, list[str] | None]] = [
                ("direct", None),
                ("pigeond call", ["--delivery", "call", "--batch-max", "1"]),
                ("pigeond turn", ["--delivery", "turn", "--batch-max", "1"]),
                ("pigeond turn+batch", ["--delivery", "turn", "--batch-max", "10"]),
            ]
            for way, args in ways:
                session = server.create_session(directory, way)
                llm.reset()
                if args is None:
                    send_direct(server, session, n)
                    settle(server, llm, session, n)
                else:
                    daemon = DaemonProcess(
                        work, work / f"{version}-{way}.db", opencode_url=server.url,
                        extra_args=[*args, "--busy-window-s", "3", *GUARD_OFF, *BRAKES_OFF],
                    )  # fmt: skip
                    with running(daemon):
                        send_via_pigeond(daemon, session, n)
                        settle(server, llm, session, n)
                rows.append(measure(version, way, server, llm, session, n))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, quick="4 messages, 0.2 s per completion", runs=None)
    parser.add_argument("--messages", type=int, default=None, help="messages (8)")
    parser.add_argument("--delay", type=float, default=None, help="seconds per completion (0.5)")
    args = parse(parser, argv)
    messages = args.messages or (4 if args.quick else 8)
    delay = args.delay if args.delay is not None else 0.2 if args.quick else 0.5
    rows = []
    with scratch_dir("delivery") as work:
        for version in (OPENCODE_1_15, OPENCODE_1_18):
            rows += run_version(version, messages, delay, work)
    print(f"{messages} messages from {SENDERS} senders at once, to one session;"
          f" fake LLM {delay:g} s per completion; {machine_line()}\n")  # fmt: skip
    head = ("opencode", "sent", "most turns at once", "in transcript", "duplicates", "turns used")
    cells = [(f"{r.version} {r.way}", str(r.sent), str(r.most_at_once), f"{r.found}/{r.sent}",
              str(r.duplicates), str(r.turns)) for r in rows]  # fmt: skip
    print("\n".join(markdown_table(head, cells)))


if __name__ == "__main__":
    main()
