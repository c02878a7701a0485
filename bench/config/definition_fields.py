"""One-line refusals (ConfigError naming ``QUEUE``) for a queue definition's TOML tables: a missing or empty
string, an unknown key, a value of the wrong shape. Standard library only."""

from __future__ import annotations

from typing import Any

from bench.errors import ConfigError


def fail(defn: str, what: str, allowed: str) -> ConfigError:
    return ConfigError("QUEUE", f"{defn}: {what}; allowed: {allowed}")


def text(data: dict, key: str, defn: str, where: str, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise fail(defn, f"{where}{key} is missing", f"{where}{key} = \"...\" (a string)")
        return None
    if not isinstance(value, str) or not value.strip():
        raise fail(defn, f"{where}{key} is {value!r}", "a non-empty string")
    return value


def only(data: Any, allowed: set | dict, defn: str, where: str) -> dict:
    if not isinstance(data, dict):
        raise fail(defn, f"[{where}] is not a table", f"a [{where}] table")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise fail(defn, f"unknown key {unknown[0]!r} in [{where}]", ", ".join(sorted(allowed)))
    return data
