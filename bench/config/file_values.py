"""The TOML type each run parameter must have in a workload or sweep file. Standard library only."""

from __future__ import annotations

from typing import Any

from bench.config.parameters import BY_KEY
from bench.errors import ConfigError

#: The TOML types each kind accepts in a workload or sweep file (bool is never a number there).
_FILE_TYPES = {
    "int": (int,), "number": (int, float), "share": (int, float), "choice": (str,), "text": (str,),
    "duration": (str, int, float), "flag": (bool, int), "table": (dict, str), "list": (list, str),
}


def check_file_value(key: str, value: Any, source: str) -> None:
    """Refuse a workload/sweep file value whose TOML type does not fit the parameter ``key`` (``source`` names
    the file). Raises ConfigError naming the key, or listing the allowed keys for an unknown one."""
    param = BY_KEY.get(key)
    if param is None:
        raise ConfigError(key.upper(), f"unknown key in {source}; allowed: {', '.join(sorted(BY_KEY))}")
    types = _FILE_TYPES[param.kind]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if param.kind == "flag" and isinstance(value, int) and not isinstance(value, bool):
        ok = value in (0, 1)
    if not ok:
        if param.kind == "flag":  # AUTOVACUUM = "off" was a choice once
            raise ConfigError(param.name, f"{value!r} in {source} is a TOML {type(value).__name__}; allowed: true or "
                                          "false")
        want = {"int": "an integer", "number": "a number", "share": "a number", "choice": "a string",
                "text": "a string", "duration": "a string such as \"30s\" or a number of seconds",
                "table": "a table or a string", "list": "a list or a string"}
        raise ConfigError(param.name, f"{value!r} in {source} is a TOML {type(value).__name__}; allowed: "
                                      f"{want[param.kind]} ({param.allowed_text().replace('`', '') or param.help})")
