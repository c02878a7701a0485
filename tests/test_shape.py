"""The code's shape, read from ``bench/`` (as tests/test_layers.py reads its imports).

Rules:
1. A function (or method) is at most :data:`MAX_FUNCTION_LINES` lines, ``def`` line to last line
   (decorators not counted).
2. A function takes at most :data:`MAX_POSITIONAL` positional parameters (``self``/``cls`` not counted);
   keyword-only ones, after ``*``, are not limited.
3. A module is at most :data:`MAX_FILE_LINES` lines.
4. One number format: ``bench/`` defines exactly one ``fmt_num``, and no ``fmt_*`` name twice.
5. No duplicated code of :data:`MIN_DUPLICATE_LINES` or more lines, as pylint's ``duplicate-code``
   check finds it (imports, docstrings, comments and signatures left out), except the pairs of
   modules in :data:`DUPLICATE_EXEMPTIONS`.

``KNOWN`` and ``DUPLICATE_EXEMPTIONS`` list what breaks a rule today, each with its reason, while the
redesign is under way. The tests fail on an offender that is not listed, and on a listed one that no
longer offends (so each list can only shrink, and each fix is recorded by deleting its line).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
MAX_FUNCTION_LINES = 80
MAX_POSITIONAL = 6
MAX_FILE_LINES = 400
MIN_DUPLICATE_LINES = 6

#: (file under the repository, function's qualified name or "" for the file, "lines" | "positional") -> why it
#: breaks a rule today.
KNOWN: dict[tuple[str, str, str], str] = {}

#: The modules (a set of two or more) whose shared lines pylint reports, -> why they are left today.
DUPLICATE_EXEMPTIONS: dict[frozenset[str], str] = {}


def _functions(tree: ast.Module):
    """Each function of ``tree``, nested ones and methods included: (qualified name, node, is a method)."""
    def walk(node: ast.AST, prefix: str, in_class: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child, in_class
                yield from walk(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", True)
            else:
                yield from walk(child, prefix, in_class)
    yield from walk(tree, "", False)


def positional_count(node: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> int:
    """The positional parameters of ``node``; a method's ``self``/``cls`` (not a static method's) not counted."""
    params = [*node.args.posonlyargs, *node.args.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if is_method and not static and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    return len(params)


def offenders(path: Path, source: str) -> dict[tuple[str, str, str], int]:
    """What in ``source`` (the text of ``path``) breaks rules 1-3: (file, name, measure) -> the measure."""
    name = path.relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    found = {}
    lines = len(source.splitlines())
    if lines > MAX_FILE_LINES:
        found[(name, "", "lines")] = lines
    for qualname, node, is_method in _functions(ast.parse(source, str(path))):
        length = node.end_lineno - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found[(name, qualname, "lines")] = length
        positional = positional_count(node, is_method)
        if positional > MAX_POSITIONAL:
            found[(name, qualname, "positional")] = positional
    return found


def test_functions_and_files_keep_their_size():
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        found.update(offenders(path, path.read_text()))
    new = {key: n for key, n in found.items() if key not in KNOWN}
    gone = sorted(set(KNOWN) - set(found))
    assert not new, (f"over {MAX_FUNCTION_LINES} lines a function, {MAX_POSITIONAL} positional parameters or "
                     f"{MAX_FILE_LINES} lines a file:\n"
                     + "\n".join(f"  {f} {q or '(the file)'}: {n} {m}" for (f, q, m), n in sorted(new.items())))
    assert not gone, f"fixed, so delete from KNOWN: {gone}"


def test_the_shape_rules_catch_what_they_forbid():
    """Each rule, given code it forbids, says so; and what it allows passes (the check itself could be wrong)."""
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    assert offenders(Path("m.py"), f"@decorated\ndef f():\n{long_body}") == {}  # 80 lines, decorator not counted
    assert offenders(Path("m.py"), f"def f():\n{long_body}    y = 0\n") == {("m.py", "f", "lines"): 81}
    method_body = long_body.replace("    x", "        x")
    assert offenders(Path("m.py"), f"class C:\n    def g(self):\n{method_body}        y = 0\n") == {
        ("m.py", "C.g", "lines"): 81}
    assert offenders(Path("m.py"), "def f(a, b, c, d, e, f, g): pass\n") == {("m.py", "f", "positional"): 7}
    assert offenders(Path("m.py"), "def f(a, b, c, /, d, e, f, g): pass\n") == {("m.py", "f", "positional"): 7}
    assert offenders(Path("m.py"), "def f(a, b, c, d, e, f, *, g, h, i): pass\n") == {}
    assert offenders(Path("m.py"), "def f(a, b, c, d, e, f, *args, g=1, **kw): pass\n") == {}
    assert offenders(Path("m.py"), "class C:\n    def m(self, a, b, c, d, e, f): pass\n") == {}
    assert offenders(Path("m.py"), "class C:\n    @classmethod\n    def m(cls, a, b, c, d, e, f): pass\n") == {}
    assert offenders(Path("m.py"), "class C:\n    @staticmethod\n    def m(self, a, b, c, d, e, f): pass\n") == {
        ("m.py", "C.m", "positional"): 7}
    assert offenders(Path("m.py"), "def outer():\n    def inner(a, b, c, d, e, f, g): pass\n") == {
        ("m.py", "outer.inner", "positional"): 7}
    assert offenders(Path("m.py"), "x = 1\n" * MAX_FILE_LINES) == {}
    assert offenders(Path("m.py"), "x = 1\n" * (MAX_FILE_LINES + 1)) == {("m.py", "", "lines"): MAX_FILE_LINES + 1}


def _fmt_definitions() -> dict[str, list[str]]:
    """Each ``fmt_*`` function name defined in ``bench/`` -> the modules (file:line) that define it."""
    found: dict[str, list[str]] = {}
    for path in sorted(BENCH.rglob("*.py")):
        for qualname, node, _ in _functions(ast.parse(path.read_text(), str(path))):
            if node.name.startswith("fmt_"):
                found.setdefault(node.name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_one_number_format():
    """One ``fmt_num`` (bench/report/format.py) for every page, and no formatter written twice under one name."""
    found = _fmt_definitions()
    assert found.get("fmt_num", []) and len(found["fmt_num"]) == 1, found.get("fmt_num")
    assert found["fmt_num"][0].startswith("bench/report/format.py:")
    twice = {name: where for name, where in found.items() if len(where) > 1}
    assert not twice, f"fmt_* functions defined more than once: {twice}"


#: pylint reports a similarity of more than ``--min-similarity-lines`` lines (pylint 4: a block of 6 shared
#: lines is reported with 5, not with 6; test_the_duplicate_check_finds_one holds it to that).
_PYLINT = [sys.executable, "-m", "pylint", "--disable=all", "--enable=duplicate-code",
           f"--min-similarity-lines={MIN_DUPLICATE_LINES - 1}", "--ignore-imports=y", "--ignore-docstrings=y",
           "--ignore-comments=y", "--ignore-signatures=y", "--score=n"]


def duplicates(target: str, cwd: Path) -> list[tuple[frozenset[str], str]]:
    """pylint's duplicate-code reports on ``target`` (a package path, relative to ``cwd``): for each,
    the set of modules that share the lines, and the report's text."""
    done = subprocess.run([*_PYLINT, target], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode & (1 | 2 | 32) == 0, f"pylint did not run: {done.returncode}\n{done.stdout}{done.stderr}"
    found = []
    for report in re.split(r"^\S+:\d+:\d+: R0801: ", done.stdout, flags=re.M)[1:]:
        modules = frozenset(re.findall(r"^==([\w.]+):\[\d+:\d+\]", report, flags=re.M))
        assert len(modules) >= 2, report
        found.append((modules, report.strip()))
    return found


def test_no_duplicated_code_beyond_the_exemptions():
    found = duplicates("bench", ROOT)
    new = [text for modules, text in found if modules not in DUPLICATE_EXEMPTIONS]
    gone = sorted(sorted(m) for m in set(DUPLICATE_EXEMPTIONS) - {modules for modules, _ in found})
    assert not new, (f"{len(new)} duplicated blocks of {MIN_DUPLICATE_LINES} or more lines (write the logic once, "
                     "or list the modules in DUPLICATE_EXEMPTIONS with the reason):\n" + "\n\n".join(new))
    assert not gone, f"no duplicate left between these, so delete from DUPLICATE_EXEMPTIONS: {gone}"


def test_the_duplicate_check_finds_one(tmp_path):
    """Six shared lines in two modules are reported, five are not (the check itself could be wrong)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    body = "".join(f"    total = total * {i} + len(items) - {i}\n" for i in range(MIN_DUPLICATE_LINES))
    (package / "a.py").write_text(f"def a(items):\n    total = 0\n{body}    return total\n")
    (package / "b.py").write_text(f"def b(things, items):\n    total = 1\n{body}    return -total\n")
    (package / "c.py").write_text(f"def c(items):\n    total = 2\n{body.split(chr(10), 1)[1]}    return total + 1\n")
    assert [modules for modules, _ in duplicates("pkg", tmp_path)] == [frozenset({"pkg.a", "pkg.b"})]
