"""SQL text as queue definitions write it: quoted and commented spans, ``{locking}``, and ``:name`` parameters
rendered as ``$n`` or literals. Standard library only."""

from __future__ import annotations

import re

#: The placeholder in a claim that the policy's locking clause replaces.
LOCKING_PLACEHOLDER = "{locking}"


def skip_quoted(text: str, i: int) -> int | None:
    """Index after a quoted/commented token at ``text[i]`` ('…', E'…', "…", $tag$…$tag$, -- and /* */), or None."""
    n, c = len(text), text[i]
    if c == "'":
        backslash = i > 0 and text[i - 1] in "eE"
        i += 1
        while i < n:
            if backslash and text[i] == "\\":
                i += 2
                continue
            if text[i] == "'":
                if i + 1 < n and text[i + 1] == "'":
                    i += 2
                    continue
                break
            i += 1
        return i + 1
    if c == '"':
        end = text.find('"', i + 1)
        return n if end < 0 else end + 1
    if text.startswith("--", i):
        end = text.find("\n", i)
        return n if end < 0 else end + 1
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return n if end < 0 else end + 2
    if c == "$" and (m := re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", text[i:])) and not (
            i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
        tag = m.group(0)
        end = text.find(tag, i + len(tag))
        return n if end < 0 else end + len(tag)
    return None


def outside_quotes(text: str, token: str) -> list[int]:
    """Where ``token`` stands in SQL ``text`` outside what :func:`skip_quoted` skips (offsets)."""
    found, i, n = [], 0, len(text)
    while i < n:
        after = skip_quoted(text, i)
        if after is not None:
            i = after
        elif text.startswith(token, i):
            found.append(i)
            i += len(token)
        else:
            i += 1
    return found


def has_locking(text: str) -> bool:
    """True when ``{locking}`` stands in ``text`` outside what :func:`skip_quoted` skips."""
    return bool(outside_quotes(text, LOCKING_PLACEHOLDER))


def replace_locking(text: str, clause: str) -> str:
    """``text`` with each ``{locking}`` that :func:`has_locking` sees replaced by ``clause``."""
    for at in reversed(outside_quotes(text, LOCKING_PLACEHOLDER)):
        text = text[:at] + clause + text[at + len(LOCKING_PLACEHOLDER):]
    return text


def scan_parameters(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of each ``:name`` in ``text`` (offsets, colon included), skipping ``::`` casts and
    what :func:`skip_quoted` skips."""
    found, past = [], 0  # past: the end of the last cast or parameter, whose colons are not others
    for i in outside_quotes(text, ":"):
        if i < past:
            continue
        if text.startswith("::", i):
            past = i + 2
        elif m := re.match(r":([A-Za-z_][A-Za-z0-9_]*)", text[i:]):
            found.append((i, i + len(m.group(0)), m.group(1)))
            past = i + len(m.group(0))
    return found


def render(text: str, placeholder, order: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """(``text`` with each ``:name`` replaced by ``placeholder(position, name)``, the names in position order);
    positions from 1, one per distinct name, ``order``'s first."""
    order = list(order)
    out, last = [], 0
    for start, end, name in scan_parameters(text):
        if name not in order:
            order.append(name)
        out.append(text[last:start])
        out.append(placeholder(order.index(name) + 1, name))
        last = end
    out.append(text[last:])
    return "".join(out), order
