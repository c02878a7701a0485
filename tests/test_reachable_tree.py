"""A server's files the user it runs as cannot reach (root's private folder): linked or copied once beside the
servers' directories, laid out as at their source, reused, rebuilt when aged, never taken from a place another
user holds, and made by two runs at once without a race (bench/engines/reachable_tree.py). The user is a real
one of this machine other than ours; the files are small stand-ins made here (the servers: test_first_run.py)."""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import stat
import tempfile
import threading

import pytest

from bench.engines.embedded_base import EmbeddedError
from bench.engines.embedded_host import RunAs
from bench.engines.reachable_tree import CACHE_PREFIX, reachable_tree, unreachable

PARTS = ("pkg/pginstall", "pkg.libs")


def _other_user() -> RunAs:
    """A user of this machine that is not this process's: the server's user under root."""
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid != os.geteuid():
            return RunAs(name, pw.pw_uid, pw.pw_gid)
    raise AssertionError("no user other than this process's: add postgres or nobody")


def _site(tmp_path: pathlib.Path) -> pathlib.Path:
    """A private folder (mode 700) holding a wheel's layout: pkg/pginstall/{bin,lib}, pkg.libs, a private file."""
    private = tmp_path / "private"
    site = private / "site"
    (site / "pkg/pginstall/bin").mkdir(parents=True)
    (site / "pkg/pginstall/lib").mkdir()
    (site / "pkg.libs").mkdir()
    for rel, mode in (("pkg/pginstall/bin/postgres", 0o755), ("pkg/pginstall/lib/a.so", 0o644),
                      ("pkg.libs/libpq.so", 0o755), ("pkg/pginstall/lib/secret.conf", 0o600)):
        (site / rel).write_text(f"the file {rel}\n")
        (site / rel).chmod(mode)
    os.symlink("a.so", site / "pkg/pginstall/lib/a.so.1")
    private.chmod(0o700)
    return site


@pytest.fixture
def places():
    """(the private site, a directory for the copies), both in a world-traversable directory (pytest's own
    base is private), removed afterwards."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="qbench-test-reach-"))
    base.chmod(0o755)
    (base / "shared").mkdir()
    yield _site(base), base / "shared"
    shutil.rmtree(base)


def test_a_reachable_tree_is_used_where_it_is(places):
    site, parent = places
    site.parent.chmod(0o755)
    (site / "pkg/pginstall/lib/secret.conf").chmod(0o644)
    lines: list[str] = []
    assert reachable_tree(site, PARTS, _other_user(), parent, lines.append) == site
    assert lines == [] and list(parent.iterdir()) == []


def test_an_unreachable_tree_is_linked_once_laid_out_alike_and_reused(places):
    site, parent = places
    user, lines = _other_user(), []
    why = unreachable(site / PARTS[0], user)
    assert why.startswith(f"user {user.name!r} cannot enter {site.parent} (mode drwx------)"), why
    dest = reachable_tree(site, PARTS, user, parent, lines.append)
    assert dest.parent == parent and dest.name.startswith(CACHE_PREFIX), dest
    assert len(lines) == 1 and lines[0].startswith(why) and str(dest) in lines[0], lines
    assert unreachable(dest / PARTS[0], user) is None and unreachable(dest / PARTS[1], user) is None
    linked, copied = dest / "pkg/pginstall/bin/postgres", dest / "pkg/pginstall/lib/secret.conf"
    assert linked.stat().st_ino == (site / "pkg/pginstall/bin/postgres").stat().st_ino  # hard-linked: readable by all
    assert copied.stat().st_ino != (site / "pkg/pginstall/lib/secret.conf").stat().st_ino  # copied, made readable
    assert stat.S_IMODE(copied.stat().st_mode) == 0o644 and copied.read_text() == "the file pkg/pginstall/lib/secret.conf\n"
    assert stat.S_IMODE((site / "pkg/pginstall/lib/secret.conf").stat().st_mode) == 0o600  # the source untouched
    assert os.readlink(dest / "pkg/pginstall/lib/a.so.1") == "a.so" and (dest / "pkg.libs/libpq.so").is_file()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755 and dest.stat().st_uid == os.geteuid()
    assert reachable_tree(site, PARTS, user, parent, lines.append) == dest and len(lines) == 1  # reused, silently
    assert sorted(p.name for p in parent.iterdir()) == [f".{dest.name}.lock", dest.name]  # no work directory left
    (site / "pkg/pginstall/lib/a.so").write_text("another build\n")
    assert reachable_tree(site, PARTS, user, parent, lines.append) != dest  # a changed build: another copy


def test_a_copy_missing_a_file_is_rebuilt(places):
    site, parent = places
    user = _other_user()
    dest = reachable_tree(site, PARTS, user, parent, lambda _line: None)
    (dest / "pkg.libs/libpq.so").unlink()  # aged out by a temporary-file cleaner
    assert reachable_tree(site, PARTS, user, parent, lambda _line: None) == dest
    assert (dest / "pkg.libs/libpq.so").read_text() == "the file pkg.libs/libpq.so\n"
    assert sorted(p.name for p in parent.iterdir()) == [f".{dest.name}.lock", dest.name]


def test_a_copy_place_held_otherwise_is_refused_in_one_line(places):
    site, parent = places
    user = _other_user()
    dest = reachable_tree(site, PARTS, user, parent, lambda _line: None)
    dest.chmod(0o777)  # anyone could have put a binary there
    with pytest.raises(EmbeddedError) as err:
        reachable_tree(site, PARTS, user, parent, lambda _line: None)
    assert str(err.value).startswith(f"{dest} is not a directory of this user writable by it alone (drwxrwxrwx")
    assert "\n" not in str(err.value) and "remove it" in str(err.value)


def test_two_runs_at_once_get_one_complete_copy(places):
    site, parent = places
    user, got, errors = _other_user(), [], []

    def place():
        try:
            got.append(reachable_tree(site, PARTS, user, parent, lambda _line: None))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=place) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(set(got)) == 1, (errors, got)
    assert sorted(p.name for p in parent.iterdir()) == [f".{got[0].name}.lock", got[0].name]
    assert (got[0] / "pkg/pginstall/bin/postgres").read_text() == "the file pkg/pginstall/bin/postgres\n"
