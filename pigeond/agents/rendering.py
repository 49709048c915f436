"""The tools' answers as text, ported from the opencode plugin (its renderInbox,
renderOwed, renderStatus, renderFanOut, renderChannels, renderMembers) so that an agent
reads the same lines whichever client it runs in.

Every value from the daemon goes through :func:`~pigeond.agents.escaping.field`, every
payload line starts with ``> ``: only these functions write a line without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pigeond.agents.escaping import QUOTE, QuotedPayload, field, utf8_len

MAX_OUTPUT_BYTES: Final = 8192
DEFAULT_READ_LIMIT: Final = 10
MAX_READ_LIMIT: Final = 50
MIN_PAYLOAD_SHOWN: Final = 300
PAGE_BUDGET: Final = MAX_OUTPUT_BYTES - 500  # room for the first and last lines
MAX_OWED_LINES: Final = 20
MAX_LIST_LINES: Final = 50

Json = Mapping[str, Any]


def iso_time(ms: object) -> str:
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "-"


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _obj(value: object) -> Json:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class View:
    """Which page :func:`render_inbox` draws: the inbox (times are the hand-offs) or a
    channel's history (times are the sends)."""

    of: str
    whole: str
    time_key: str
    again: Callable[[str], str]
    paged: bool = True  # a search is not: its last line says whether more matched


INBOX_VIEW: Final = View(
    "",
    "it came whole in its <swarm_message> envelope",
    "handed_off_at",
    lambda cursor: f'call swarm_read with since="{cursor}"',
)


def history_view(channel: str) -> View:
    return View(
        f" on channel {channel}",
        "the history shows no more of it",
        "created_at",
        lambda cursor: (
            f'call swarm_channel with action "history", channel "{channel}" and since="{cursor}"'
        ),
    )


def search_view(query: str) -> View:
    return View(
        f" matching {field(query, 200)}",
        "swarm_status or swarm_read shows the rest",
        "created_at",
        lambda cursor: "",
        paged=False,
    )


def proof_of(message: Json) -> str:
    """Who really sent it, after its sender: " (verified)", " (person)", " (unverified)"."""
    proof = message.get("from_verified")
    return f" ({field(proof)})" if proof else ""


def _header(message: Json, view: View) -> str:
    fields = [f"from {field(message.get('from'))}{proof_of(message)}", field(message.get("kind"))]
    fields.append(field(message.get("priority")))
    if message.get("channel"):
        fields.append(f"channel {field(message.get('channel'))}")
    if message.get("to") and view.time_key == "created_at" and not message.get("channel"):
        fields.append(f"to {field(message.get('to'))}")
    if message.get("reply_to"):
        fields.append(f"reply_to {field(message.get('reply_to'))}")
    fields.append(iso_time(message.get(view.time_key)))
    return f"--- {field(message.get('msg_id'))} · {' · '.join(fields)}"


@dataclass(frozen=True, slots=True)
class _Item:
    message: Json
    shown: QuotedPayload
    marker: str
    header: str

    def cost(self, cap: int) -> int:
        size = self.shown.size
        body = size if size is not None and size <= cap else cap + utf8_len(self.marker)
        return utf8_len(self.header) + 1 + len(QUOTE) + 1 + body


def page_items(messages: Sequence[Json], view: View) -> list[_Item]:
    items = []
    for message in messages:
        payload = str(message.get("payload") or "")
        marker = (
            f"\n[cut: {field(message.get('msg_id'))} has {utf8_len(payload)} bytes; {view.whole}]"
        )
        items.append(
            _Item(message, QuotedPayload(payload, PAGE_BUDGET), marker, _header(message, view))
        )
    return items


def fitting_count(items: Sequence[_Item]) -> int:
    """How many of the items, from the first, get at least MIN_PAYLOAD_SHOWN bytes (one
    always)."""
    used = count = 0
    for item in items:
        need = item.cost(MIN_PAYLOAD_SHOWN)
        if count > 0 and used + need > PAGE_BUDGET:
            break
        used += need
        count += 1
    return count


def render_inbox(page: Json, since: str | None, limit: int, view: View = INBOX_VIEW) -> str:
    """Each message is its header line, then its payload with every line quoted; each
    payload whole or cut to a common cap as large as the output budget allows; what does
    not fit waits for the next read, which the last line names."""
    messages = [_obj(m) for m in _list(page.get("messages"))]
    after = f" after {since}" if since else ""
    if not messages:
        again = f' (pass since="{since}" again later)' if since else ""
        return f"no messages{view.of}{after}{again}"
    items = page_items(messages, view)
    count = fitting_count(items)
    shown = items[:count]

    def fits(cap: int) -> bool:
        return sum(item.cost(cap) for item in shown) <= PAGE_BUDGET

    sizes = [item.shown.size if item.shown.size is not None else PAGE_BUDGET for item in shown]
    low, high = MIN_PAYLOAD_SHOWN, min(PAGE_BUDGET, max([*sizes, MIN_PAYLOAD_SHOWN]))
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    blocks = []
    for item in shown:
        size = item.shown.size
        whole = size is not None and size <= low
        text = item.shown.whole() if whole else item.shown.cut(low) + item.marker
        blocks.append(f"{item.header}\n{QUOTE}{text}")
    more = bool(page.get("has_more")) or count < len(messages)
    last = shown[count - 1].message.get("msg_id")
    cursor = field(last if count < len(messages) else page.get("next_cursor"))
    title = f"{count} message{'' if count == 1 else 's'}{view.of}{after}"
    if not view.paged:
        footer = "more matched: narrow the search, or raise its limit" if more else "no more"
    elif more:
        footer = f"more waiting: {view.again(cursor)}"
    else:
        footer = f"no more; next time {view.again(cursor)} for newer ones only"
    return "\n".join([f"{title} (limit {limit}):", *blocks, footer])


def render_owed(owed: Json) -> list[str]:
    """The replies a session owes and is owed: ids, sessions, kinds and states only."""
    lines: list[str] = []

    def side(items: list[Any], line: Callable[[Json], str]) -> None:
        for raw in items[:MAX_OWED_LINES]:
            item = _obj(raw)
            state = "" if item.get("state") == "open" else f", {field(item.get('state'))}"
            due = f"; due {iso_time(item.get('due_at'))}" if item.get("due_at") is not None else ""
            lines.append(f"{line(item)} ({field(item.get('kind'))}{state}{due})")
        if len(items) > MAX_OWED_LINES:
            lines.append(f"... and {len(items) - MAX_OWED_LINES} more")

    owes, owed_to = _list(owed.get("owes")), _list(owed.get("owed"))
    side(
        owes,
        lambda o: f"you owe a reply to {field(o.get('msg_id'))} from {field(o.get('creditor'))}",
    )
    side(
        owed_to, lambda o: f"{field(o.get('debtor'))} owes you a reply to {field(o.get('msg_id'))}"
    )
    if lines and owes:
        lines.append("(answer with swarm_send and reply_to set to that msg_id)")
    return lines


def counted(n: object, noun: str) -> str:
    shown = field(n)
    return f"{shown} {noun}{'' if shown == '1' else 's'}"


def list_lines(items: Sequence[Any], line: Callable[[Json], str]) -> list[str]:
    lines = [f"- {line(_obj(item))}" for item in items[:MAX_LIST_LINES]]
    if len(items) > MAX_LIST_LINES:
        lines.append(f"... and {len(items) - MAX_LIST_LINES} more")
    return lines


def render_status(message: Json) -> str:
    if message.get("state") == "fanned_out":
        return render_channel_status(message)
    target = (
        f"to {field(message.get('to'))}"
        if message.get("to")
        else f"on channel {field(message.get('channel'))}"
    )
    parts = [f"{field(message.get('msg_id'))} {target}: {field(message.get('state'))}"]
    if message.get("from_verified"):
        parts.append(f"sender {field(message.get('from_verified'))}")
    if message.get("attempts"):
        parts.append(f"attempts {field(message.get('attempts'))}")
    for key, words in (("handed_off_at", "handed off"), ("verified_at", "seen in the transcript")):
        if message.get(key) is not None:
            parts.append(f"{words} {iso_time(message.get(key))}")
    if message.get("answered_at") is not None:
        reply = message.get("answer_message_id")
        by = f" (reply {field(reply)})" if reply else ""
        parts.append(f"answered {iso_time(message.get('answered_at'))}{by}")
    retrying = message.get("attempts") or message.get("last_error")
    if message.get("state") == "queued" and retrying and message.get("next_retry_at") is not None:
        parts.append(f"next try {iso_time(message.get('next_retry_at'))}")
    wait = message.get("waiting_on_permission")
    if isinstance(wait, dict):
        parts.append(render_permission_wait(message.get("to"), wait))
    hold = message.get("hold")
    if isinstance(hold, dict) and hold.get("kind") == "brake":
        parts.append(f"held for a person: {field(hold.get('reason'), 500)}")
    elif message.get("last_error"):
        parts.append(f"last error: {field(message.get('last_error'), 500)}")
    if message.get("thread"):
        parts.append(f"thread {field(message.get('thread'))}")
    return "; ".join(parts)


def held_line(msg_id: str, held: Json) -> str:
    """What a send a conversation brake holds answers: "held: <reason>" first (pigeon-mcp's
    swarm_send; pigeon-send prints the same)."""
    return (
        f"held: {field(held.get('reason'), 500)} ({field(msg_id)} is stored and waits for a"
        " person to release or drop it; sending it again will not help)"
    )


def render_permission_wait(target: object, wait: Json) -> str:
    """The target stopped in the turn handling the message: opencode asks a permission that
    nobody at its terminal gave; a person answers it (``pigeon permissions``, the TUI)."""
    patterns = wait.get("patterns")
    shown = " ".join(str(p) for p in patterns) if isinstance(patterns, list) else ""
    what = (
        f"{field(wait.get('permission'))} `{field(shown, 200)}`"
        if shown
        else field(wait.get("permission"))
    )
    return (
        f"waiting on a permission in {field(target)}: {what} (request {field(wait.get('id'))},"
        f" asked {iso_time(wait.get('asked_at'))}; a person answers it: pigeon permissions)"
    )


def render_channel_status(message: Json) -> str:
    deliveries, skipped = _list(message.get("deliveries")), _list(message.get("skipped"))
    head = f"{field(message.get('msg_id'))} on channel {field(message.get('channel'))}: fanned_out"
    if not deliveries and not skipped:
        nobody = "no other member when it was sent; it stays in the channel's history"
        return f"{head} to nobody ({nobody})"
    left = f"; not delivered to {counted(len(skipped), 'member')}" if skipped else ""
    title = f"{head}, a copy to each of {counted(len(deliveries), 'member')}{left}:"
    lines = [
        title,
        *list_lines(
            deliveries,
            lambda d: (
                f"{field(d.get('to'))}: {field(d.get('state'))}, receipt"
                f" {field(d.get('receipt'))} (copy {field(d.get('msg_id'))})"
            ),
        ),
        *list_lines(
            skipped,
            lambda s: f"{field(s.get('session'))}: not delivered ({field(s.get('reason'))})",
        ),
    ]
    if deliveries:
        lines.append("(swarm_status with a copy's msg_id shows its attempts, times and last error)")
    return "\n".join(lines)


def render_fan_out(msg_id: str, channel: str, answer: Json) -> str:
    deliveries, skipped = _list(answer.get("deliveries")), _list(answer.get("skipped"))
    text = f"sent {msg_id} on channel {channel}: "
    if not deliveries and not skipped:
        text += "no other member, so nobody got it (it stays in the channel's history)"
    else:
        text += f"a copy to each of {counted(len(deliveries), 'member')}"
        held = sum(1 for d in deliveries if _obj(d).get("held") is True)
        if held:
            text += f" ({held} of them held by that member's own policy until it lets it in)"
    if skipped:
        why = [
            f"{field(_obj(s).get('session'))} ({field(_obj(s).get('reason'))})"
            for s in skipped[:MAX_LIST_LINES]
        ]
        if len(skipped) > MAX_LIST_LINES:
            why.append(f"... and {len(skipped) - MAX_LIST_LINES} more")
        text += f"; not delivered to {counted(len(skipped), 'member')}: {'; '.join(why)}"
    return text


def render_channels(channels: object) -> str:
    items = _list(channels)
    if not items:
        return 'you are a member of no channel (join one with swarm_channel action "join")'

    def line(c: Json) -> str:
        at = c.get("last_message_at")
        last = f"last message {iso_time(at)}" if at is not None else "no message yet"
        return f"{field(c.get('channel'))}: {counted(c.get('members'), 'member')}, {last}"

    return "\n".join(
        [f"you are a member of {counted(len(items), 'channel')}:", *list_lines(items, line)]
    )


def render_members(channel: str, answer: Json, session: str | None) -> str:
    members = _list(answer.get("members"))
    if not members:
        return f'{channel} has no members (swarm_channel action "join" makes you one)'
    most = (
        f", at most {field(answer.get('max_members'))}"
        if answer.get("max_members") is not None
        else ""
    )

    def line(m: Json) -> str:
        tags = [f"@{field(m.get('name'))}" if m.get("name") else ""]
        tags.append("you" if session is not None and m.get("session") == session else "")
        shown = ", ".join(t for t in tags if t)
        tagged = f" ({shown})" if shown else ""
        return f"{field(m.get('session'))}{tagged}, joined {iso_time(m.get('joined_at'))}"

    title = f"{channel}: {counted(len(members), 'member')}{most}, in the order they joined:"
    return "\n".join([title, *list_lines(members, line)])
