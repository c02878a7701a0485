"""The user the embedded server runs as: ourselves, or the ``mysql`` system user under root.

``mariadbd`` refuses to start as root unless told ``--user=root``. Under root the server runs as
the ``mysql`` system user (``--user=mysql``: mariadbd starts as root and drops to it), the user
the distribution's server runs as, so the throwaway server, whose ``root`` account has no
password on 127.0.0.1, is not an OS-root process. Only when no ``mysql`` user exists does it
run as root (``--user=root``). Its file access from SQL (``SELECT … INTO OUTFILE``,
``LOAD_FILE``) is confined to a directory of its own either way (see
:mod:`bench.engines.mariadb.embedded_config`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import stat

__all__ = ["SERVER_USER", "RunAs", "pick_run_as"]

SERVER_USER = "mysql"


@dataclasses.dataclass(frozen=True)
class RunAs:
    """Who the server runs as: ourselves (``name is None``: not root) or the user ``name``
    (uid, gid) that ``--user=`` names; ``name == "root"`` when root has no ``mysql`` user."""

    name: str | None = None
    uid: int = -1
    gid: int = -1

    @property
    def user_options(self) -> list[str]:
        """``["--user=NAME"]`` for mariadbd and the install tool, or ``[]`` when not root."""
        return [f"--user={self.name}"] if self.name else []

    @property
    def other_user(self) -> bool:
        """True when the server runs as a user other than this process's (files must be chowned)."""
        return self.name is not None and self.uid != os.geteuid()

    def can_traverse(self, path: pathlib.Path) -> bool:
        """True when this user may enter directory ``path`` (its execute bit for the user, a group or others)."""
        if not self.other_user:
            return os.access(path, os.X_OK)
        st = path.stat()
        if st.st_uid == self.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid in os.getgrouplist(self.name, self.gid):
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def pick_run_as() -> RunAs:
    """Not root: ourselves. Root: the ``mysql`` user if it exists, else root (``--user=root``)."""
    if os.geteuid() != 0:
        return RunAs()
    try:
        pw = pwd.getpwnam(SERVER_USER)
    except KeyError:
        return RunAs("root", 0, 0)
    return RunAs(SERVER_USER, pw.pw_uid, pw.pw_gid)
