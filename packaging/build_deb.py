#!/usr/bin/env python3
"""Build ``dist/pigeond_<version>_<arch>.deb`` from this checkout with ``dpkg-deb`` alone.

No debhelper, no ``debian/`` source package: a staging tree is laid out by
hand and packed with ``dpkg-deb --root-owner-group --build``. Layout:

- ``/usr/lib/pigeond/``: pigeond and every Python dependency, installed with
  ``pip install --target`` from binary wheels chosen for the *target*
  interpreter (CPython 3.11, Debian 12's ``/usr/bin/python3``, glibc <= 2.36),
  whatever Python runs this script. Nothing is compiled here, so no build
  interpreter's headers or ABI leak in; ``.pyc`` files are made by postinst
  with ``/usr/bin/python3`` and removed by prerm.
- ``/usr/bin/<script>`` for every console script of the built wheel (so every
  ``[project.scripts]`` entry): ``#!/usr/bin/python3 -I`` wrappers that put
  ``/usr/lib/pigeond`` first on ``sys.path``.
- units in ``/lib/systemd/system`` and ``/usr/lib/systemd/user``, the system
  user and group in ``/usr/lib/sysusers.d/pigeond.conf``, the
  socket-activation drop-ins and the opencode plugins (``opencode-plugin/pigeond-swarm.js``
  for opencode 1.x, ``pigeond-swarm-v2.js`` for 2.x) in ``/usr/share/pigeond``, the default
  ``/etc/pigeond/pigeond.toml`` (a conffile), docs in ``/usr/share/doc/pigeond``.

Run it with a Python that has ``build`` (the dev extra): ``make deb``.

Where the time goes (2 cores, pip's cache warm): about two thirds is ``dpkg-deb``'s xz
compression of the ~60 MB tree (``--compress-level`` 6, the release default; 1 is a
few times faster and 15% larger), the rest building pigeond's sdist and wheel (one
isolated build environment for both) and pip's two resolutions (the sdist-only
dependencies for this Python, then every wheel for the target). xz is CPU-bound: on a
busy machine the whole takes several times longer.

Network: pip fetches the build backend (setuptools, wheel) and every dependency
(about 30 MB of wheels, then from pip's cache) from the index pip is configured with,
PyPI by default. pip's own settings apply (``PIP_INDEX_URL`` for a mirror;
``PIP_NO_INDEX=1`` with ``PIP_FIND_LINKS=<folder of wheels>`` for an offline build).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path
from typing import Literal

import build.env  # pypa's build, which binds `build` too

REPO = Path(__file__).resolve().parent.parent
PACKAGING = REPO / "packaging"
SYSTEMD = REPO / "systemd"

LIBDIR = "/usr/lib/pigeond"
TARGET_PYTHON = "/usr/bin/python3"
# Debian 12 (bookworm): CPython 3.11, glibc 2.36.
TARGET_PY_VERSION = (3, 11)
TARGET_GLIBC = (2, 36)
OLDEST_MANYLINUX_GLIBC = (2, 5)
DPKG_TO_WHEEL_ARCH = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "i386": "i686",
    "ppc64el": "ppc64le",
    "s390x": "s390x",
    "armhf": "armv7l",
}
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
Distribution = Literal["sdist", "wheel"]
MAINTAINER = "pigeond maintainers <root@localhost>"


class BuildError(RuntimeError):
    """A step failed; the text says which and why."""


@dataclass(frozen=True)
class Script:
    """One console script: ``name = module:attr.path``."""

    name: str
    module: str
    attr: str


def run(cmd: Sequence[str | Path], env: dict[str, str] | None = None) -> None:
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    result = subprocess.run([str(c) for c in cmd], check=False, env=env)
    if result.returncode != 0:
        raise BuildError(f"command failed (exit {result.returncode}): {cmd[0]} ...")


def dpkg_architecture() -> str:
    out = subprocess.run(
        ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def debian_version(pep440: str) -> str:
    """A PEP 440 version as a Debian upstream version (pre-releases sort before the release)."""
    version = re.sub(r"[.]?(a|b|rc|dev)(\d*)", r"~\1\2", pep440)
    return version.replace("_", ".")


def manylinux_platforms(wheel_arch: str, glibc: tuple[int, int]) -> list[str]:
    """Every manylinux platform tag a system with this glibc runs, newest first."""
    major, newest = glibc
    tags = [
        f"manylinux_{major}_{minor}_{wheel_arch}"
        for minor in range(newest, OLDEST_MANYLINUX_GLIBC[1] - 1, -1)
    ]
    tags += [
        f"{legacy}_{wheel_arch}" for legacy, floor in LEGACY_MANYLINUX.items() if floor <= glibc
    ]
    return tags


def build_wheel(workdir: Path) -> Path:
    """pigeond's wheel, built from its sdist (as ``make dist`` does), so stale files in
    an in-tree ``build/lib`` can never end up in the package.

    Both are built in one isolated environment: ``python -m build`` would make a second
    one (a new venv and another install of setuptools) for the wheel.
    """
    out = workdir / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"+ sdist and wheel of {REPO} in one isolated build environment", flush=True)
    try:
        with build.env.DefaultIsolatedEnv() as env:
            sdist = Path(in_build_env(env, REPO, "sdist", out))
            with tarfile.open(sdist) as archive:
                # the sdist just built; the "data" filter where this Python has
                # extraction filters (PEP 706)
                if hasattr(tarfile, "data_filter"):
                    archive.extractall(out, filter="data")
                else:
                    archive.extractall(out)
            unpacked = out / sdist.name.removesuffix(".tar.gz")
            wheel = Path(in_build_env(env, unpacked, "wheel", out))
    except (build.BuildException, build.BuildBackendException) as e:
        raise BuildError(f"building pigeond's sdist and wheel failed: {e}") from e
    if not re.fullmatch(r"pigeond-[^-]+-py3-none-any\.whl", wheel.name):
        raise BuildError(f"expected a pure-Python pigeond wheel, got {wheel.name}")
    return wheel


def in_build_env(
    env: build.env.DefaultIsolatedEnv, srcdir: Path, distribution: Distribution, out: Path
) -> str:
    """Build ``distribution`` of ``srcdir`` in ``env``, after installing what the build
    backend asks for (nothing more once the first build has installed it)."""
    builder = build.ProjectBuilder.from_isolated_env(env, srcdir)
    env.install(builder.build_system_requires)
    env.install(builder.get_requires_for_build(distribution))
    return builder.build(distribution, out)


def build_wheelhouse(wheel: Path, workdir: Path) -> Path:
    """Wheels of every dependency published only as an sdist (sdnotify is one).

    Built here with this Python; only the pure ones (``py3-none-any``) can match
    the target tags below, so a compiled sdist-only dependency fails the build
    instead of slipping in with this interpreter's ABI.
    """
    wheelhouse = workdir / "wheelhouse"
    shutil.rmtree(wheelhouse, ignore_errors=True)
    cmd: list[str | Path] = [
        sys.executable, "-m", "pip", "wheel",
        "--wheel-dir", wheelhouse,
        "--disable-pip-version-check",
        "--no-input",
        wheel,
    ]  # fmt: skip
    run(cmd)
    return wheelhouse


def install_tree(wheel: Path, wheelhouse: Path, libdir: Path, arch: str) -> None:
    """pigeond and its dependencies, as wheels for the target interpreter only."""
    wheel_arch = DPKG_TO_WHEEL_ARCH.get(arch)
    if wheel_arch is None:
        raise BuildError(f"no wheel platform known for the Debian architecture {arch!r}")
    py = f"{TARGET_PY_VERSION[0]}{TARGET_PY_VERSION[1]}"
    cmd: list[str | Path] = [
        sys.executable, "-m", "pip", "install",
        "--find-links", wheelhouse,
        "--target", libdir,
        "--no-compile",
        "--no-warn-script-location",
        "--disable-pip-version-check",
        "--no-input",
        "--only-binary=:all:",
        "--implementation", "cp",
        "--python-version", f"{TARGET_PY_VERSION[0]}.{TARGET_PY_VERSION[1]}",
        "--abi", f"cp{py}",
    ]  # fmt: skip
    for platform in manylinux_platforms(wheel_arch, TARGET_GLIBC):
        cmd += ["--platform", platform]
    cmd.append(wheel)
    run(cmd, env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})
    # pip's console scripts point at this build's Python; ours are made below.
    shutil.rmtree(libdir / "bin", ignore_errors=True)
    for pycache in libdir.rglob("__pycache__"):
        shutil.rmtree(pycache)
    for direct_url in libdir.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()  # names this build's wheel path; not needed


def glibc_floor(libdir: Path) -> tuple[int, int] | None:
    """The newest glibc any installed wheel needs, from the wheels' platform tags."""
    floor: tuple[int, int] | None = None
    for wheel_file in libdir.glob("*.dist-info/WHEEL"):
        needs: list[tuple[int, int]] = []
        for line in wheel_file.read_text().splitlines():
            if not line.startswith("Tag:"):
                continue
            platform = line.split("-")[-1].strip()
            m = re.match(r"manylinux_(\d+)_(\d+)_", platform)
            if m:
                needs.append((int(m.group(1)), int(m.group(2))))
            for legacy, version in LEGACY_MANYLINUX.items():
                if platform.startswith(legacy + "_"):
                    needs.append(version)
        if needs:
            wheel_needs = min(needs)  # the wheel runs wherever its oldest tag does
            floor = wheel_needs if floor is None else max(floor, wheel_needs)
    return floor


def console_scripts(libdir: Path) -> list[Script]:
    dists = [d for d in distributions(path=[str(libdir)]) if d.metadata["Name"] == "pigeond"]
    if len(dists) != 1:
        raise BuildError(f"pigeond is not installed in {libdir}")
    scripts = []
    for ep in dists[0].entry_points:
        if ep.group != "console_scripts":
            continue
        module, _, attr = ep.value.partition(":")
        attr = attr.split("[")[0].strip()
        if not attr:
            raise BuildError(f"console script {ep.name} = {ep.value}: no function named")
        scripts.append(Script(ep.name, module.strip(), attr))
    if not scripts:
        raise BuildError("the wheel declares no console scripts")
    return sorted(scripts, key=lambda s: s.name)


def wrapper(script: Script) -> str:
    """A launcher run by Debian's Python in isolated mode (-I: no PYTHON* variables,
    no user site-packages, no current directory on sys.path)."""
    head, _, rest = script.attr.partition(".")
    call = f"{head}.{rest}" if rest else head
    return (
        f"#!{TARGET_PYTHON} -I\n"
        f'"""{script.name}: installed by the pigeond .deb (packaging/build_deb.py)."""\n'
        "import sys\n\n"
        f'sys.path.insert(0, "{LIBDIR}")\n'
        f"from {script.module} import {head}  # noqa: E402\n\n"
        f"sys.exit({call}())\n"
    )


def unit_exec_start(unit: Path) -> str:
    lines = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
    if len(lines) != 1:
        raise BuildError(f"{unit}: expected one ExecStart= line")
    return lines[0].removeprefix("ExecStart=").split()[0]


def copy_file(src: Path, dest: Path, mode: int = 0o644) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(mode)


def lay_out_files(root: Path, scripts: list[Script]) -> None:
    bindir = root / "usr/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for script in scripts:
        path = bindir / script.name
        path.write_text(wrapper(script))
        path.chmod(0o755)
    units = {
        SYSTEMD / "pigeond.service": root / "lib/systemd/system/pigeond.service",
        SYSTEMD / "pigeond.socket": root / "lib/systemd/system/pigeond.socket",
        SYSTEMD / "pigeond-unix.socket": root / "lib/systemd/system/pigeond-unix.socket",
        SYSTEMD / "user/pigeond.service": root / "usr/lib/systemd/user/pigeond.service",
    }
    for src, dest in units.items():
        if src.suffix == ".service" and unit_exec_start(src) != "/usr/bin/pigeond":
            raise BuildError(f"{src}: ExecStart must run /usr/bin/pigeond")
        copy_file(src, dest)
    for dropin in ("socket-activation.conf", "socket-activation-unix.conf"):
        copy_file(SYSTEMD / dropin, root / "usr/share/pigeond" / dropin)
    # the system user and group pigeond, made by postinst (systemd-sysusers pigeond.conf)
    copy_file(SYSTEMD / "pigeond.sysusers", root / "usr/lib/sysusers.d/pigeond.conf")
    for name in ("pigeond-swarm.js", "pigeond-swarm-v2.js"):  # for opencode 1.x and 2.x
        plugin = PACKAGING / "opencode-plugin" / name
        copy_file(plugin, root / "usr/share/pigeond/opencode-plugin" / plugin.name)
    copy_file(PACKAGING / "pigeond.toml", root / "etc/pigeond/pigeond.toml")
    doc = root / "usr/share/doc/pigeond"
    copy_file(REPO / "README.md", doc / "README.md")
    copy_file(PACKAGING / "copyright", doc / "copyright")


def normalise_modes(root: Path) -> None:
    """Directories 0755, files 0644, or 0755 where any execute bit was set."""
    for dirpath, _dirnames, filenames in os.walk(root):
        Path(dirpath).chmod(0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            path.chmod(0o755 if path.stat().st_mode & 0o111 else 0o644)


def installed_size_kib(root: Path) -> int:
    total = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += (path.stat().st_size + 1023) // 1024
        else:
            total += 1
    return total


def write_control(root: Path, version: str, arch: str, glibc: tuple[int, int] | None) -> None:
    debian = root / "DEBIAN"
    debian.mkdir()
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    py_major, py_minor = TARGET_PY_VERSION
    depends = [f"python3 (>= {py_major}.{py_minor}~)", f"python3 (<< {py_major}.{py_minor + 1}~)"]
    if glibc is not None:
        depends.append(f"libc6 (>= {glibc[0]}.{glibc[1]})")
    depends.append("procps")  # /bin/kill for ExecReload=
    md5sums = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "DEBIAN" not in path.parts:
            digest = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
            md5sums.append(f"{digest}  {path.relative_to(root)}\n")
    control = (
        f"Package: pigeond\n"
        f"Version: {version}\n"
        f"Architecture: {arch}\n"
        f"Maintainer: {MAINTAINER}\n"
        f"Installed-Size: {installed_size_kib(root)}\n"
        f"Depends: {', '.join(depends)}\n"
        f"Recommends: systemd\n"
        f"Section: net\n"
        f"Priority: optional\n"
        f"Description: {project['description']}\n"
        " pigeond lets opencode sessions on one workstation send each other\n"
        " messages safely: it stores each message in SQLite before accepting it,\n"
        " and hands messages to `opencode serve` one at a time per target session,\n"
        " retrying with backoff.\n"
        " .\n"
        " This package carries its Python dependencies (Twisted, treq, ...) in\n"
        f" {LIBDIR}; it needs no network at install time.\n"
    )
    (debian / "control").write_text(control)
    (debian / "conffiles").write_text("/etc/pigeond/pigeond.toml\n")
    (debian / "md5sums").write_text("".join(md5sums))
    for name in ("postinst", "prerm", "postrm"):
        copy_file(PACKAGING / "debian" / name, debian / name, 0o755)


def build_deb(outdir: Path, workdir: Path, compress_level: int = 6) -> Path:
    os.umask(0o022)
    arch = dpkg_architecture()
    workdir.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(workdir)
    pep440 = wheel.name.split("-")[1]
    version = debian_version(pep440)
    root = workdir / "root"
    shutil.rmtree(root, ignore_errors=True)
    libdir = root / LIBDIR.lstrip("/")
    install_tree(wheel, build_wheelhouse(wheel, workdir), libdir, arch)
    has_native = any(libdir.rglob("*.so"))
    deb_arch = arch if has_native else "all"
    scripts = console_scripts(libdir)
    lay_out_files(root, scripts)
    normalise_modes(root)
    write_control(root, version, deb_arch, glibc_floor(libdir) if has_native else None)
    outdir.mkdir(parents=True, exist_ok=True)
    deb = outdir / f"pigeond_{version}_{deb_arch}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zxz", f"-z{compress_level}", "--build", root, deb])
    print(f"built {deb} ({', '.join(s.name for s in scripts)} in /usr/bin)")
    return deb


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--outdir", type=Path, default=REPO / "dist", help="where the .deb goes")
    parser.add_argument(
        "--workdir", type=Path, default=REPO / "build" / "deb", help="wheel and staging tree"
    )
    parser.add_argument(
        "--compress-level",
        type=int,
        choices=range(10),
        default=6,
        help="xz level: 6 for a release (default), 1 is 10x faster and 15%% larger",
    )
    args = parser.parse_args(argv)
    try:
        build_deb(args.outdir.resolve(), args.workdir.resolve(), args.compress_level)
    except (BuildError, subprocess.CalledProcessError, OSError) as e:
        print(f"build_deb: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
