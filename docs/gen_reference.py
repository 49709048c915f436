"""The manual's reference pages, made from the one declaration of each fact.

- ``reference/configuration.md`` from :data:`pigeond.config.OPTIONS` (and the functions
  that compute the defaults depending on the environment);
- ``reference/http-api.md`` from ``pigeond/api/openapi.json`` (:mod:`docs.gen_http_api`);
- ``reference/tui-keys.md`` from the key bindings of ``pigeon-tui``'s screens
  (:mod:`pigeond_tui.keys` and the screens that declare their own).

``make docs`` runs ``python -m docs.gen_reference`` to write them; tests/test_docs.py makes
them again in memory and fails, saying to run ``make docs``, when a committed page differs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from textual.app import App
from textual.binding import Binding, BindingType

from docs import gen_http_api
from pigeond.config import (
    OPTIONS,
    Option,
    default_db_path,
    default_runtime_socket,
    default_token_path,
)
from pigeond.config.options import toml_value

DOCS = Path(__file__).resolve().parent


def generated_note(source: str) -> str:
    return (
        f"<!-- Generated from {source} by docs/gen_reference.py: do not edit by hand; "
        "run `make docs`. -->"
    )


# -- configuration -------------------------------------------------------------------------

USER = {"XDG_STATE_HOME": "$XDG_STATE_HOME", "XDG_RUNTIME_DIR": "$XDG_RUNTIME_DIR"}
SERVICE = {"STATE_DIRECTORY": "$STATE_DIRECTORY", "RUNTIME_DIRECTORY": "$RUNTIME_DIRECTORY"}
HOME_ONLY = {"HOME": "~"}


def computed_defaults() -> dict[str, str]:
    """What an option left empty becomes, by the very functions pigeond calls at start,
    given placeholder environments: a user's, the system service's."""
    user_db = default_db_path(USER)
    return {
        "db": (
            f"`{user_db}` (`{default_db_path(HOME_ONLY)}` without `$XDG_STATE_HOME`); "
            f"under systemd `{default_db_path(SERVICE)}`"
        ),
        "token_file": (
            f"`token` beside `db`: `{default_token_path(user_db, USER)}`; for a PostgreSQL `db`,"
            f" in the state folder: `{default_token_path('postgresql://host/db', USER)}`"
        ),
        "runtime_socket": (
            f"`{default_runtime_socket(USER)}`; under the system service "
            f"`{default_runtime_socket(SERVICE)}`; without either folder, none"
        ),
        "daemon_name": "the host's name",
    }


def default_text(option: Option, computed: dict[str, str]) -> str:
    if option.name in computed:
        return computed[option.name]
    return f"`{toml_value(option.default)}`"


def kind_text(option: Option) -> str:
    if option.kind is tuple:
        return "list"
    return {str: "text", int: "integer", float: "number", bool: "boolean"}[option.kind]


def configuration_page() -> str:
    computed = computed_defaults()
    out = [
        "# Configuration reference",
        "",
        generated_note("pigeond/config/options.py (OPTIONS)"),
        "",
        "Every option, as `pigeond --help` and `pigeond --check-config` know it. Each can be",
        "given as a flag, as an environment variable or as a top-level key of the TOML file;",
        "a flag wins over the environment, the environment over the file, the file over the",
        "default. A list is comma-separated in a flag or variable and a TOML array in the file.",
        "How to set them, and what the options mean in more words:",
        "[Configuration](../configuration.md).",
        "",
        "| file key | flag | environment variable | type | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for option in OPTIONS:
        out.append(
            f"| `{option.name}` | `{option.flag}` | `{option.env_var}` | {kind_text(option)} "
            f"| {default_text(option, computed)} | {gen_http_api.cell(option.help)} |"
        )
    return "\n".join(out) + "\n"


# -- pigeon-tui's keys ---------------------------------------------------------------------


def screens() -> list[tuple[str, str, Sequence[BindingType]]]:
    """Each screen of pigeon-tui that has keys: its title, what opens it, its bindings."""
    from pigeond_tui.addressing import AddressingScreen
    from pigeond_tui.app import PigeonApp
    from pigeond_tui.consent import PolicyScreen
    from pigeond_tui.held import HeldScreen
    from pigeond_tui.owed import OwedScreen
    from pigeond_tui.permissions import PermissionsScreen
    from pigeond_tui.screens import ConfirmScreen, HelpScreen, NumberScreen
    from pigeond_tui.threads import ThreadsScreen

    return [
        ("The main screen", "what `?` shows, in this order", PigeonApp.BINDINGS),
        ("The inbound policy screen", "opened with `p`", PolicyScreen.BINDINGS),
        ("The names and channels screen", "opened with `c`", AddressingScreen.BINDINGS),
        ("The owed replies screen", "opened with `o`", OwedScreen.BINDINGS),
        ("The waiting screen", "opened with `w`", PermissionsScreen.BINDINGS),
        ("The held screen", "opened with `h`", HeldScreen.BINDINGS),
        ("The threads screen", "opened with `t`", ThreadsScreen.BINDINGS),
        ("A question", "before every action", ConfirmScreen.BINDINGS),
        (
            "A question for a number",
            "asked by the held screen's raise (`+`); Enter takes the number",
            NumberScreen.BINDINGS,
        ),
        ("The help screen", "opened with `?`", HelpScreen.BINDINGS),
    ]


def key_rows(app: App[None], bindings: Sequence[BindingType]) -> list[tuple[str, str, str]]:
    """(keys as the footer shows them, footer label or "-", what the key does)."""
    rows = []
    for binding in bindings:
        assert isinstance(binding, Binding), binding
        keys = [
            app.get_key_display(Binding(k, binding.action, binding.description))
            for k in binding.key.split(",")
        ]
        label = binding.description if binding.show else "-"
        rows.append((" ".join(keys), label, binding.tooltip or binding.description))
    return rows


def key_cell(keys: str) -> str:
    return ", ".join(gen_http_api.code(k) for k in keys.split(" "))


def tui_keys_page() -> str:
    app: App[None] = App()
    out = [
        "# pigeon-tui keys",
        "",
        generated_note("the key bindings of pigeon-tui's screens (tui/pigeond_tui/keys.py)"),
        "",
        "Every key of every screen of [`pigeon-tui`](../operating.md#the-terminal-ui-pigeon-tui),",
        "made from the bindings the screens declare. The footer column is the word the",
        "footer shows for the key (`-`: not in the footer, but the key works).",
    ]
    for title, opened, bindings in screens():
        out += ["", f"## {title}", "", f"{opened.capitalize()}.", ""]
        out += ["| key | footer | does |", "|---|---|---|"]
        for keys, label, does in key_rows(app, bindings):
            out.append(f"| {key_cell(keys)} | {label} | {gen_http_api.cell(does)} |")
    return "\n".join(out) + "\n"


# -- all of them ---------------------------------------------------------------------------


def http_api_page() -> str:
    note = generated_note("pigeond/api/openapi.json")
    return gen_http_api.render(gen_http_api.load(), note)


PAGES: dict[str, Callable[[], str]] = {
    "reference/configuration.md": configuration_page,
    "reference/http-api.md": http_api_page,
    "reference/tui-keys.md": tui_keys_page,
}


def main(argv: Sequence[str]) -> int:
    """Write every generated page; ``--check`` only names the stale ones (exit 1)."""
    check = "--check" in argv
    stale = []
    for relative, make in PAGES.items():
        path = DOCS / relative
        text = make()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(relative)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote docs/{relative}")
    if check and stale:
        print("stale: " + ", ".join(f"docs/{p}" for p in stale) + "; run `make docs`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
