"""A sweep file's optional ``[target]`` table (see :mod:`bench.sweep.driver`)."""

from __future__ import annotations

from typing import Any

from bench.errors import ConfigError


def check_target(target: Any, file_name: str) -> None:
    """Validate the optional ``[target]`` table (Little's law in the report); raises ConfigError (``TARGET``)."""
    if target is None:
        return
    allowed = "a table with rate_jobs_per_s (> 0, jobs/s) and utilisation (> 0 and <= 1)"
    if not isinstance(target, dict):
        raise ConfigError("TARGET", f"[target] in {file_name} is not a table; allowed: {allowed}")
    unknown = sorted(set(target) - {"rate_jobs_per_s", "utilisation"})
    if unknown:
        raise ConfigError("TARGET", f"unknown key {unknown[0]!r} in [target] of {file_name}; allowed: {allowed}")
    rate, util = target.get("rate_jobs_per_s"), target.get("utilisation", 0.7)
    for name, value, ok in (("rate_jobs_per_s", rate, lambda v: 0 < v < float("inf")),
                            ("utilisation", util, lambda v: 0 < v <= 1)):
        if value is None and name == "rate_jobs_per_s":
            raise ConfigError("TARGET", f"[target] in {file_name} has no rate_jobs_per_s; allowed: {allowed}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            raise ConfigError("TARGET", f"{name} = {value!r} in [target] of {file_name} is not allowed; allowed: {allowed}")
