"""Finding PgBouncer's binary (``POOLER=pgbouncer``): the machine's own, Debian's package ``pgbouncer``. No driver."""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any

from bench.errors import ConfigError
from bench.usage import option, setting

__all__ = ["DEBIAN_PACKAGE", "SEARCH_DIRS", "require_pooler_binary", "find_pgbouncer"]

#: The Debian package that installs the binary (``/usr/sbin/pgbouncer``).
DEBIAN_PACKAGE = "pgbouncer"
#: Looked in after ``PATH``: Debian puts the binary in ``/usr/sbin``, which is not on a normal user's ``PATH``.
SEARCH_DIRS = ("/usr/sbin", "/usr/bin")


def find_pgbouncer() -> str:
    """The path of the ``pgbouncer`` binary: ``PATH`` first, then :data:`SEARCH_DIRS`. Raises ConfigError
    (``POOLER``) naming the Debian package when there is none; nothing is ever downloaded."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    for directory in SEARCH_DIRS:
        path = pathlib.Path(directory, "pgbouncer")
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ConfigError("POOLER", f"pgbouncer: no pgbouncer binary on PATH or in {', '.join(SEARCH_DIRS)}; allowed: "
                                f"install the Debian package {DEBIAN_PACKAGE} (apt-get install {DEBIAN_PACKAGE}), then "
                                f"{setting('pooler', 'pgbouncer')}; or leave {option('pooler')} out")


def require_pooler_binary(cfg: Any) -> None:
    """Raise ConfigError (``POOLER``) when ``cfg``'s pooler cannot be started on this machine (no binary); called
    before any server is started, without connecting."""
    if cfg.pooler == "pgbouncer":
        find_pgbouncer()
