"""A first run that works anywhere (README, "Install"): on a machine without PostgreSQL's server binaries the
default install's server wheel runs the embedded server; under root, from a checkout and its packages in a
private folder (mode 700), every embedded server starts, the wheels' from a reachable copy of their files; the
machine's own binaries out of the server's user's reach are refused in one line, nothing created. Root only:
hiding binaries takes a mount namespace, and only root runs the server as another user."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import pwd
import re
import shutil
import subprocess
import sys

import pytest

from bench.engines.embedded_base import EmbeddedError
from bench.engines.postgres import embedded_binaries
from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.embedded_binaries import WHEELS, ServerBinaries, ServerWheel
from bench.errors import ConfigError
from conftest import CLEAN_INVARIANTS, REPO

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root mounts and runs the server as another user")
SHORT_RUN = ("run", "--duration", "2s", "--warmup", "1s", "--workers", "2")
DEFAULT_WHEEL = next(iter(WHEELS.values()))


def _machine_bindirs() -> list[pathlib.Path]:
    """Every directory where the tool looks for the machine's server binaries (embedded_binaries)."""
    found = [pathlib.Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")]
    if shutil.which("pg_config"):
        found.append(pathlib.Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()))
    if shutil.which("initdb"):
        found.append(pathlib.Path(shutil.which("initdb")).resolve().parent)
    return found


def _hidden(argv: list[str], empty: pathlib.Path) -> list[str]:
    """``argv`` in a mount namespace of its own where the machine has no PostgreSQL server binaries: an empty
    directory over /usr/lib/postgresql, /dev/null over a ``postgres`` anywhere else the tool looks."""
    mounts = ["mount --bind \"$0\" /usr/lib/postgresql"] if os.path.isdir("/usr/lib/postgresql") else []
    mounts += [f"mount --bind /dev/null {d / 'postgres'}" for d in _machine_bindirs()
               if not d.is_relative_to("/usr/lib/postgresql") and (d / "postgres").exists()]
    script = " && ".join([*mounts, 'exec "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(empty), *argv]


def _run_json(results: pathlib.Path) -> dict:
    (run_dir,) = results.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["invariants"] == CLEAN_INVARIANTS and summary["jobs_completed"] > 0
    return json.loads((run_dir / "run.json").read_text())


def _release(bindir: pathlib.Path) -> str:
    """The release ``postgres --version`` names: '18.6' ('postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)')."""
    out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True).stdout
    return re.search(r"\d+(?:\.\d+)+", out).group(0)


def _first_private(path: pathlib.Path) -> pathlib.Path:
    """The first directory from / down to ``path`` that others cannot enter: what the server's user is refused."""
    return next(p for p in (*reversed(path.parents), path) if not p.stat().st_mode & 0o001)


@root_only
@pytest.mark.slow
def test_without_the_machines_binaries_the_default_run_uses_the_default_installs_wheel(tmp_path):
    """``qbench run`` with nothing but the default install, on a machine whose server binaries are hidden: the
    run says it starts the default wheel's server, and the release the server reported is that wheel's."""
    empty, results = tmp_path / "empty", tmp_path / "results"
    empty.mkdir()
    argv = _hidden([sys.executable, "-m", "bench.cli.main", *SHORT_RUN, "--results", str(results)], empty)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f", {DEFAULT_WHEEL.source}; running as " in proc.stdout, proc.stdout
    run = _run_json(results)
    assert run["embedded_database"] is True and run["config"]["pg_version"] == "auto"
    assert run["server_release"] == _release(DEFAULT_WHEEL.bindir()), run["server_release"]


def _private_checkout(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(a checkout, its packages) inside a folder of mode 700: the tree's ``bench`` and each wheel's package
    and libraries, linked in, so that the tool and the wheels' binaries are reached through the private path."""
    private = tmp_path / "private"
    checkout, site = private / "checkout", private / "site"
    checkout.mkdir(parents=True)
    site.mkdir()
    (checkout / "bench").symlink_to(REPO / "bench")
    for wheel in WHEELS.values():
        package = wheel.bindir().parent.parent
        for path in (package, package.with_name(f"{package.name}.libs")):
            if path.exists():
                (site / path.name).symlink_to(path)
    private.chmod(0o700)
    return checkout, site


@root_only
@pytest.mark.slow
@pytest.mark.parametrize("pg_version", ["system", *WHEELS])
def test_from_a_private_folder_under_root_each_embedded_server_starts(tmp_path, pg_version):
    """Root runs the tool from a checkout in a mode-700 folder, its packages there too: the machine's server and
    each wheel's start (a wheel's from its files linked into the temporary directory, said in one line); the
    release the server reported is the one asked for."""
    checkout, site = _private_checkout(tmp_path)
    results = checkout / "results"
    env = {**os.environ, "PYTHONPATH": f"{site}:{checkout}"}
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", *SHORT_RUN, "--pg-version", pg_version,
                           "--results", str(results)], capture_output=True, text=True, timeout=300, cwd=checkout,
                          env=env)
    copies = re.findall(r" linked into (\S+), which it can reach", proc.stdout)
    for copy in map(pathlib.Path, copies):  # this test's own (keyed by its private path): removed, with its lock
        shutil.rmtree(copy)
        copy.with_name(f".{copy.name}.lock").unlink()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = _run_json(results)
    if pg_version == "system":
        assert copies == [] and run["server_release"] == _release(embedded_binaries.find_server_binaries().bindir)
        return
    wheel = WHEELS[pg_version]
    assert len(copies) == 1 and f"cannot enter {_first_private(checkout)} (mode drwx------)" in proc.stdout, proc.stdout
    assert f"binaries: {copies[0]}/" in proc.stdout and f"{wheel.source}; running as " in proc.stdout, proc.stdout
    assert run["server_release"] == _release(wheel.bindir()), run["server_release"]


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


@root_only
def test_the_machines_binaries_out_of_the_servers_users_reach_are_refused_before_anything(tmp_path, monkeypatch):
    """Binaries a build finds its files by fixed paths cannot be copied: ConfigError (``PG_VERSION``, exit 2)
    naming the folder and what to pick instead, raised before the server's directory is made."""
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    machine = embedded_binaries.find_server_binaries("system")
    for name in ("initdb", "pg_ctl", "postgres"):
        (private / "bin" / name).symlink_to(machine.bindir / name)
    private.chmod(0o700)
    monkeypatch.setattr(embedded_binaries, "_system_binaries", lambda: ServerBinaries(private / "bin", "PATH"))
    base = tmp_path / "servers"
    with pytest.raises(ConfigError) as err:
        with PostgresRecipe.server(10, base_dir=base, log=lambda _line: None, pg_version="system"):
            pass  # pragma: no cover
    line, user = str(err.value), next(name for name in PostgresRecipe.users + (PostgresRecipe.create_user,)
                                      if _exists(name))
    assert line.startswith("--pg-version: system: the machine's server binaries (PATH) cannot be run by the "
                           f"server's user: user {user!r} cannot enter {_first_private(private)} (mode drwx------)"), line
    assert "allowed: 16, 18 (a server wheel), or --dsn postgresql://..." in line and "\n" not in line and err.value.exit_status == 2
    assert not base.exists()


def test_without_the_machines_binaries_or_a_wheel_auto_says_what_to_install(monkeypatch):
    """The default wheel left out (a platform it has no build for, ``pip install --no-deps``): one line naming
    it, the command installing it, PostgreSQL's server or a DSN instead."""
    monkeypatch.setattr(embedded_binaries, "_system_binaries", lambda: None)
    for major, wheel in list(WHEELS.items()):
        monkeypatch.setitem(WHEELS, major, ServerWheel(f"qbench_no_such_wheel_{major}", wheel.extra, wheel.major))
    with pytest.raises(EmbeddedError) as err:
        embedded_binaries.find_server_binaries("auto")
    line = str(err.value)
    assert line.startswith("no PostgreSQL server binaries found (initdb, pg_ctl, postgres: not via pg_config"), line
    assert "the default install brings the qbench-no-such-wheel-18 wheel on Linux and macOS); install it (" in line
    assert "queue-bench[pg18]" in line and line.endswith("or pass --dsn postgresql://... to use an existing database")
    assert "\n" not in line
