#!/usr/bin/env bash
# What the test suite needs from the system beyond Python packages: headless Chromium and its WebDriver
# (tests/test_browser.py), PgBouncer (the embedded pooler's tests), pgbench and mariadb-slap (the calibration
# tests), iproute2's ip (tests/test_multihost.py's network namespaces). `make test` runs this before the first
# test (and .ci/run runs `make test`). As root the missing
# Debian packages are installed; as another user one line names them and the exit status is 2.
set -euo pipefail

# What the tests run (an absolute path, or a command looked up in PATH), and the Debian package that has it.
REQUIRED=(
    "/usr/bin/chromium chromium"
    "/usr/bin/chromedriver chromium-driver"
    "/usr/sbin/pgbouncer pgbouncer"
    "pgbench postgresql-client"
    "mariadb-slap mariadb-client"
    "ip iproute2"
)

missing=()
for entry in "${REQUIRED[@]}"; do
    read -r what package <<<"$entry"
    if [[ $what == /* ]]; then [ -x "$what" ] && continue; else command -v "$what" >/dev/null && continue; fi
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$EUID" -ne 0 ]; then
    echo "the tests need the Debian packages ${missing[*]}, not installed; allowed: run make test as root" \
         "(it installs them), or apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 2
fi
# Headless use needs none of their recommends (udev, printer tools). Another apt may hold the lock: wait.
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
