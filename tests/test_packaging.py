"""A non-editable install carries every package of bench/ (not only the top one)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module_of_bench(tmp_path):
    src = tmp_path / "src"  # a copy, so no build/ directory left in the checkout is reused
    shutil.copytree(REPO / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp_path / "dist")], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("queue_bench-*.whl")
    in_wheel = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    in_tree = {str(p.relative_to(REPO)) for p in (REPO / "bench").rglob("*.py")}
    assert in_tree - in_wheel == set()
    assert {"bench/engines/postgres/session.py", "bench/cli/main.py"} <= in_wheel
