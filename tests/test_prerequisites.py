"""``make test``'s system prerequisites (``tests/prerequisites.sh``): run by the test target before pytest;
as a user other than root, missing ones are one line naming their Debian packages, exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess

from conftest import REPO

SCRIPT = REPO / "tests" / "prerequisites.sh"


def test_make_test_checks_the_prerequisites_before_the_first_test():
    proc = subprocess.run(["make", "-n", "-W", "pyproject.toml", "test"], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=True)
    lines = proc.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if line.strip() == "tests/prerequisites.sh")
    pytest_at = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert check < pytest_at
    assert any("pip install --quiet -e '.[test]'" in line for line in lines[:check])


def test_not_as_root_missing_tools_are_one_line_naming_their_packages_exit_2(tmp_path):
    """As ``nobody``, with a PATH where neither pgbench nor mariadb-slap is: the script stops with one line
    naming postgresql-client and mariadb-client (and nothing installed: it is not root)."""
    proc = subprocess.run([shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash", "-s"],
                          input=SCRIPT.read_text(), capture_output=True, text=True, timeout=60,
                          env={"PATH": str(tmp_path / "empty")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and proc.stdout == "", proc.stderr
    browser = [package for path, package in (("/usr/bin/chromium", "chromium"), ("/usr/bin/chromedriver",
               "chromium-driver"), ("/usr/sbin/pgbouncer", "pgbouncer"))
               if not os.access(path, os.X_OK)]  # absolute paths: PATH does not hide them
    missing = " ".join([*browser, "postgresql-client", "mariadb-client", "iproute2"])  # ip: not on the empty PATH
    assert f"the tests need the Debian packages {missing}, not installed" in lines[0]
    assert "allowed: run make test as root" in lines[0]
    assert lines[0].endswith(f"apt-get install --no-install-recommends {missing}")
