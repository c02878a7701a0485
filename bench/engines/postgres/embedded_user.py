"""The user the embedded server runs as: ourselves, or an unprivileged system user under root.

``initdb`` refuses to run as root, so under root the server runs as the ``postgres`` system
user if it exists, otherwise as a ``qbench`` system user created on first use.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
from typing import Callable

from bench.engines.postgres.embedded_binaries import EmbeddedError

__all__ = ["FALLBACK_USER", "RunAs", "pick_run_as"]

FALLBACK_USER = "qbench"


@dataclasses.dataclass(frozen=True)
class RunAs:
    """How to run server commands: as ourselves (``name is None``) or as another user."""

    name: str | None = None
    uid: int = -1
    gid: int = -1

    def wrap(self, argv: list[str]) -> tuple[list[str], dict]:
        """Return (argv, extra subprocess kwargs) running ``argv`` as this user."""
        if self.name is None:
            return argv, {}
        runuser = shutil.which("runuser") or next(
            (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(p, os.X_OK)), None
        )
        if runuser:
            return [runuser, "-u", self.name, "--", *argv], {}
        # No runuser: let subprocess drop privileges in the child (thread-safe, unlike preexec_fn).
        groups = os.getgrouplist(self.name, self.gid)
        return argv, {"user": self.uid, "group": self.gid, "extra_groups": groups}

    def can_traverse(self, path: pathlib.Path) -> bool:
        """True when this user may enter directory ``path`` (its execute bit for the user, a group or others)."""
        if self.name is None:
            return os.access(path, os.X_OK)
        st = path.stat()
        if st.st_uid == self.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid in os.getgrouplist(self.name, self.gid):
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def pick_run_as(log: Callable[[str], None]) -> RunAs:
    """Pick the user to run initdb/pg_ctl as; creates ``qbench`` under root if needed.

    Not root: ourselves. Root: ``postgres``, else ``qbench`` (created with useradd, a line to ``log``).

    Raises:
        EmbeddedError: under root, neither user exists and ``qbench`` could not be created.
    """
    if os.geteuid() != 0:
        return RunAs()
    for name in ("postgres", FALLBACK_USER):
        try:
            pw = pwd.getpwnam(name)
            return RunAs(name, pw.pw_uid, pw.pw_gid)
        except KeyError:
            continue
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    log(f"creating system user {FALLBACK_USER!r} to run PostgreSQL (initdb refuses root)")
    try:
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", FALLBACK_USER],
            capture_output=True, text=True, timeout=30,
        )
        err = proc.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        err = str(exc)
    try:  # also covers a concurrent run having created it first
        pw = pwd.getpwnam(FALLBACK_USER)
    except KeyError:
        raise EmbeddedError(
            f"running as root and could not create system user {FALLBACK_USER!r} for PostgreSQL "
            f"({err or 'useradd failed'}); run as a non-root user or pass DSN="
        ) from None
    return RunAs(FALLBACK_USER, pw.pw_uid, pw.pw_gid)
