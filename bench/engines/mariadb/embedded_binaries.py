"""The embedded server's binaries: where ``mariadbd`` and ``mariadb-install-db`` (or their old names) are
found (the search: docs/architecture.md, "The embedded servers")."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Iterable

from bench.errors import ConfigError
from bench.usage import setting

__all__ = ["INSTALL_DB_NAMES", "SERVER_NAMES", "SYSTEM_DIRS", "ServerBinaries",
           "find_server_binaries", "search_dirs"]

SERVER_NAMES = ("mariadbd", "mysqld")
"""The server binary's names, the preferred first (``mysqld`` is its old name)."""

INSTALL_DB_NAMES = ("mariadb-install-db", "mysql_install_db")
"""The data directory tool's names, the preferred first."""

SYSTEM_DIRS: tuple[str, ...] = ("/usr/sbin", "/usr/bin")
"""Searched after ``PATH``."""



def _allowed() -> str:
    """What a refusal of the embedded MariaDB allows, as the user types it."""
    return (f"allowed: {setting('engine', 'mariadb')} with {setting('dsn', 'mysql://user@host:port/', quote=False)} "
            "of a running server, or install mariadb-server")


@dataclasses.dataclass(frozen=True)
class ServerBinaries:
    """The server's and its data directory tool's paths, as found (symlinks not resolved)."""

    server: pathlib.Path
    install_db: pathlib.Path


def search_dirs() -> list[pathlib.Path]:
    """The directories searched: ``PATH``'s, then :data:`SYSTEM_DIRS`, each once."""
    seen: dict[pathlib.Path, None] = {}
    for entry in [*os.environ.get("PATH", "").split(os.pathsep), *SYSTEM_DIRS]:
        if entry:
            seen.setdefault(pathlib.Path(entry), None)
    return list(seen)


def _first(names: tuple[str, ...], dirs: list[pathlib.Path]) -> pathlib.Path | None:
    for name in names:  # the preferred name anywhere beats the old name earlier on the path
        for d in dirs:
            path = d / name
            if os.path.isfile(path) and os.access(path, os.X_OK):  # False, not an error, for a closed dir
                return path
    return None


def find_server_binaries(dirs: Iterable[pathlib.Path | str] | None = None) -> ServerBinaries:
    """The server and its data directory tool in ``dirs`` (default :func:`search_dirs`); ConfigError (``ENGINE``)."""
    where = [pathlib.Path(d) for d in dirs] if dirs is not None else search_dirs()
    searched = (f"PATH, {', '.join(SYSTEM_DIRS)}" if dirs is None
                else ", ".join(map(str, where)) or "no directory")
    server = _first(SERVER_NAMES, where)
    if server is None:
        raise ConfigError("ENGINE", f"no MariaDB server binary (mariadbd or mysqld) on this machine "
                                    f"(searched {searched}); {_allowed()}")
    install_db = _first(INSTALL_DB_NAMES, where)
    if install_db is None:
        raise ConfigError("ENGINE", f"{server} is here but no mariadb-install-db or mysql_install_db "
                                    f"to create its data directory; {_allowed()}")
    return ServerBinaries(server, install_db)
