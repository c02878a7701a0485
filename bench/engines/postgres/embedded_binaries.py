"""The embedded server's binaries: where ``initdb``, ``pg_ctl`` and ``postgres`` are found, on the machine or
in the ``pgserver`` wheel (the order: docs/architecture.md, "The embedded servers")."""

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
import re
import shutil
import subprocess

from bench.engines.embedded_base import EmbeddedError

__all__ = ["ServerBinaries", "find_server_binaries"]

_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")


@dataclasses.dataclass(frozen=True)
class ServerBinaries:
    """A directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (their paths as text), and where it was
    found: ``"pg_config"``, ``"/usr/lib/postgresql"``, ``"PATH"`` or ``"pgserver wheel"``."""

    bindir: pathlib.Path
    source: str

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


def _pgserver_bindir() -> pathlib.Path | None:
    try:
        from pgserver import _commands  # type: ignore[import-not-found]  # here: optional, Linux and macOS only
    except Exception:  # not installed, or broken on this platform
        return None
    path = getattr(_commands, "POSTGRES_BIN_PATH", None)
    return pathlib.Path(path) if path else None


def find_server_binaries() -> ServerBinaries:
    """The first directory holding all three server binaries: ``pg_config --bindir``, the highest
    ``/usr/lib/postgresql/*/bin``, ``initdb``'s on ``PATH``, the ``pgserver`` wheel's. Raises EmbeddedError."""
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

    bindir = _pgserver_bindir()
    if bindir is not None and _is_server_bindir(bindir):
        return ServerBinaries(bindir, "pgserver wheel")

    raise EmbeddedError(
        "no PostgreSQL server binaries found (initdb, pg_ctl, postgres: not via pg_config, "
        "/usr/lib/postgresql/*/bin, PATH or the pgserver package); "
        "install PostgreSQL or pgserver, or pass DSN=postgresql://... to use an existing database"
    )
