"""The README and the docs site: short, built in strict mode, generated references current, every
command of "The usual questions" accepted by Make, every cited commit present in the repository."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import docs_reference
from bench.config.parameters import BY_KEY, readme_table

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_MAX_LINES = 250
USUAL_QUESTIONS = "## The usual questions"

# A cited commit is a token of 7-40 lower-case hex characters standing alone (not inside a word, path or
# number) that holds at least one digit and one letter a-f: "at `5373d78`", "commit c81dd91",
# "| 215d754 (before) |". A hash of digits only is recognised after "commit", "commits", "at" or "and"
# ("at 4949109"), where no other number of 7+ digits is written without thousands separators.
MIXED_HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
DIGIT_HASH = re.compile(r"\b(?:commits?|at|and)\s+`?([0-9]{7,40})(?![\w,.]\d)")
# A link in Markdown to a relative path: [text](path) or [text](path#anchor).
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)(?:#[^)\s]*)?\)")


def _doc_texts() -> dict[Path, str]:
    """README.md and every Markdown page under docs/, by path."""
    pages = [README, *sorted((REPO / "docs").rglob("*.md"))]
    return {path: path.read_text() for path in pages}


def usual_question_commands() -> list[str]:
    """The command lines of README's "The usual questions": each line of its fenced blocks."""
    text = README.read_text()
    section = text[text.index(USUAL_QUESTIONS):]
    section = section[:section.index("\n## ", len(USUAL_QUESTIONS))]
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section, flags=re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def cited_commits(text: str) -> set[str]:
    """The commit hashes a page cites (the two patterns above)."""
    return set(MIXED_HASH.findall(text)) | set(DIGIT_HASH.findall(text))


def test_readme_is_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_usual_questions_have_five_commands_that_make_accepts():
    commands = usual_question_commands()
    assert len(commands) == 5, commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "make", command
        done = subprocess.run(["make", "-n", *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert re.search(r"^\S*qbench \w", done.stdout, flags=re.M), f"{command} runs no qbench:\n{done.stdout}"


def test_the_usual_questions_check_would_catch_a_misspelt_target():
    done = subprocess.run(["make", "-n", "plann", "RATE=500"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0


def test_every_cited_commit_exists():
    cited = {commit: path for path, text in _doc_texts().items() for commit in cited_commits(text)}
    assert len(cited) >= 10, cited  # the README and the measurement pages cite many
    missing = [f"{commit} ({path.relative_to(REPO)})" for commit, path in cited.items()
               if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO).returncode != 0]
    assert missing == []


def test_the_commit_patterns_find_citations_and_skip_numbers():
    text = "at `5373d78`, commit c81dd91, | 215d754 (before) |, at 4949109; 1,000,000 rows, 2026-12-01, decade"
    assert cited_commits(text) == {"5373d78", "c81dd91", "215d754", "4949109"}


def test_readme_links_stay_inside_the_repository_and_exist():
    links = RELATIVE_LINK.findall(README.read_text())
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        target = (REPO / link).resolve()
        assert target.is_relative_to(REPO) and target.exists(), link


@pytest.mark.parametrize("path", sorted(docs_reference.pages()))
def test_generated_reference_is_current(path):
    assert (REPO / path).read_text() == docs_reference.pages()[path], (
        f"{path} is not what the code generates now: run `make docs-ref`")


def test_parameters_reference_holds_the_parameter_table():
    assert readme_table() in (REPO / "docs/reference/parameters.md").read_text()


def test_reference_check_would_catch_a_changed_default():
    """The comparison above is not vacuous: a table with one default changed renders differently."""
    changed = dataclasses.replace(BY_KEY["workers"], default=11)
    row = f"| `WORKERS` | {changed.allowed_text()} | {changed.default_shown()} |"
    assert row not in readme_table() and "| `WORKERS` | 1–1,000 | 10 |" in readme_table()


def test_cli_reference_holds_every_subcommand():
    page = (REPO / "docs/reference/cli.md").read_text()
    for name in ("run", "sweep", "plan", "capacity", "clean", "calibrate", "experiments", "compare"):
        assert f"## `qbench {name}`" in page and f"usage: qbench {name}" in page, name


def test_site_builds_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "choosing-a-design" / "index.html").is_file()


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """The strict build is what catches a broken link: the same site with one added fails."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](no-such-page.md)\n")
    config = (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "no-such-page.md" in done.stderr
