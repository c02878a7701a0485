"""``WORKLOAD``, ``SWEEP`` and ``QUEUE`` files: a name looked up in the working directory, then among the shipped
files (:mod:`bench.data`), or a path. Standard library only."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bench.data import QUEUES_DIR, SWEEPS_DIR, WORKLOADS_DIR
from bench.errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of named file: ``local`` and ``shipped`` directories, ``pattern`` the file of a name (``{}``)."""

    param: str
    noun: str
    local: str
    shipped: Path
    pattern: str
    path_hint: str

    def names_in(self, directory: Path) -> set[str]:
        """The names that have a file in ``directory``."""
        tail = self.pattern.removeprefix("{}")  # ".toml" or "/queue.toml"
        found = (p.relative_to(directory).as_posix() for p in directory.glob(self.pattern.format("*")))
        return {rel.removesuffix(tail) for rel in found if _NAME_RE.match(rel.removesuffix(tail))}


KINDS = {
    "WORKLOAD": Kind("WORKLOAD", "workload", "workloads", WORKLOADS_DIR, "{}.toml", "a path to a .toml file"),
    "SWEEP": Kind("SWEEP", "sweep", "workloads/sweeps", SWEEPS_DIR, "{}.toml", "a path to a .toml file"),
    "QUEUE": Kind("QUEUE", "queue definition", "queues", QUEUES_DIR, "{}/queue.toml",
                  "a path to a queue.toml or to its directory"),
}


def how_given(param: str) -> str:
    """How ``param`` (``WORKLOAD``, ``SWEEP``, ``QUEUE``) is given, in words, for help texts and refusals."""
    kind = KINDS[param]
    return f"a name looked up in ./{kind.local}/ of the working directory, then the shipped ones, or {kind.path_hint}"


def known_names(param: str) -> list[str]:
    """The names ``param`` may take (the working directory's and the shipped ones), sorted, each once."""
    kind = KINDS[param]
    return sorted(kind.names_in(Path.cwd() / kind.local) | kind.names_in(kind.shipped))


def find(param: str, name: str, also: tuple[str, ...] = ()) -> Path:
    """The file of ``name`` for ``param``: a path when ``name`` ends in ``.toml`` (``QUEUE``: also holds a ``/``
    or starts with ``.``), else ``./<local>/``, then the shipped directory. ``also``: other allowed values.
    Raises ConfigError naming ``param``, where it looked and what is allowed."""
    kind = KINDS[param]
    allowed = "allowed: " + ", ".join([*also, *known_names(param)]) + f", or {kind.path_hint}"
    if name.endswith(".toml"):
        path = Path(name)
    elif param == "QUEUE" and ("/" in name or name.startswith(".")):
        path = Path(name) / "queue.toml"
    elif _NAME_RE.match(name):
        local = Path.cwd() / kind.local / kind.pattern.format(name)
        path = local if local.is_file() else kind.shipped / kind.pattern.format(name)
        if not path.is_file():
            raise ConfigError(param, f"no {kind.noun} {name!r} in ./{kind.local}/ ({Path.cwd() / kind.local}) "
                                     f"or the shipped ones ({kind.shipped}); {allowed}")
        return path
    else:
        raise ConfigError(param, f"{name!r} is not a {kind.noun} name (letters, digits, - and _); {allowed}")
    if not path.is_file():
        raise ConfigError(param, f"no {kind.noun} file {str(path)!r}; {allowed}")
    return path
