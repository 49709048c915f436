"""Installing pinned releases of the real opencode (npm package ``opencode-ai``).

:func:`ensure_opencode` installs ``opencode-ai@<version>`` once, into
``<cache>/opencode/<version>/``, and returns the path of the native ``opencode`` binary;
the cache, its lock, the staging folder and the marker are :mod:`testkit.npm_install`'s.

* The binary comes from the platform package opencode-ai depends on
  (``opencode-linux-x64``, ``opencode-linux-arm64``, their ``-baseline`` and
  ``-musl`` variants...).  npm may install several of them; the first one, in
  order of preference, whose ``--version`` prints the wanted version wins, and
  the others are deleted (about 140 MB each).
* Without ``npm`` on PATH this raises :class:`OpencodeInstallError` with a
  clear message: the e2e tests fail, they never skip.
"""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path

from testkit.npm_install import (
    NpmInstallError,
    NpmTool,
    ensure_installed,
    first_reporting,
    installed,
)

OPENCODE_1_18 = "1.18.33"
OPENCODE_1_15 = "1.15.4"
PINNED_VERSIONS = (OPENCODE_1_18, OPENCODE_1_15)


class OpencodeInstallError(NpmInstallError):
    """npm is missing, the install failed, or no working binary was found."""


def opencode_cache() -> Path:
    """Where every installed version lives: ``<cache>/opencode``."""
    return OPENCODE.root()


def installed_binary(version: str) -> Path | None:
    """The binary of an already finished install of ``version``, or None."""
    return installed(OPENCODE, version)


def ensure_opencode(version: str) -> Path:
    """Install ``opencode-ai@version`` if it is not in the cache yet; return its binary."""
    return ensure_installed(OPENCODE, version)


def _platform_package() -> str:
    """``opencode-<os>-<arch>``, the name of the platform package for this machine."""
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )
    system = {"win32": "windows"}.get(sys.platform, sys.platform)
    return f"opencode-{system}-{arch}"


def _candidates(folder: Path) -> list[Path]:
    """Every ``node_modules/opencode-*/bin/opencode``, this platform's plain package first."""
    preferred = _platform_package()
    found = [
        p
        for p in folder.glob("node_modules/opencode-*/bin/opencode")
        if p.parent.parent.name != "opencode-ai" and p.is_file()
    ]

    def rank(path: Path) -> tuple[int, str]:
        name = path.parent.parent.name
        if name == preferred:
            return (0, name)
        if name == preferred + "-baseline":
            return (1, name)
        if name.startswith(preferred):
            return (2, name)
        return (3, name)

    return sorted(found, key=rank)


def _find_binary(folder: Path, version: str) -> Path:
    """The first candidate binary that runs here and reports ``version``; the other
    platform packages are deleted."""
    binary, tried = first_reporting(
        _candidates(folder),
        version,
        folder / ".probe-home",
        lambda out: (out.strip().splitlines() or [""])[-1],
        {"OPENCODE_DISABLE_AUTOUPDATE": "1"},
    )
    if binary is None:
        raise OpencodeInstallError(
            f"no working opencode {version} binary under {folder}/node_modules "
            f"(looked for {_platform_package()} and its variants); tried: {tried or 'none found'}"
        )
    _prune_other_variants(folder, keep=binary.parent.parent.name)
    return binary


def _prune_other_variants(folder: Path, keep: str) -> None:
    """Delete the platform packages not used (each is ~140 MB; npm installs every variant)."""
    for package in folder.glob("node_modules/opencode-*"):
        if package.name not in (keep, "opencode-ai") and package.is_dir():
            shutil.rmtree(package)


OPENCODE = NpmTool(
    package="opencode-ai",
    folder="opencode",
    marker="pigeond-opencode.json",
    project="pigeond-e2e-opencode",
    error=OpencodeInstallError,
    program=_find_binary,
)
