"""A user's own files next to the shipped ones (:mod:`bench.config.lookup`): ``WORKLOAD``, ``SWEEP`` and
``QUEUE`` are looked up in the working directory first (``./workloads/``, ``./workloads/sweeps/``,
``./queues/<name>/``), then in the package (:mod:`bench.data`), or given as a path. Standard library and
config only: no database."""

from __future__ import annotations

import pytest

from bench.config.lookup import find, known_names
from bench.config.queue_definition import load_queue
from bench.config.run_config import build_config
from bench.data import QUEUES_DIR, SWEEPS_DIR, WORKLOADS_DIR
from bench.errors import ConfigError
from bench.sweep.driver import Sweep


def _own_queue(cwd, name: str, description: str) -> None:
    """A queue definition ``./queues/<name>/queue.toml``: the shipped model's text with its own description."""
    text = (QUEUES_DIR / "model" / "queue.toml").read_text()
    head, sep, rest = text.partition("description = ")
    assert sep, "the model definition has no description line"
    rest = rest.split("\n", 1)[1]
    (cwd / "queues" / name).mkdir(parents=True)
    (cwd / "queues" / name / "queue.toml").write_text(f'{head}description = "{description}"\n{rest}')


def test_a_queue_in_the_working_directory_adds_to_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = known_names("QUEUE")
    assert {"model", "tasks", "procrastinate", "pgqueuer"} <= set(shipped) and "mine" not in shipped
    _own_queue(tmp_path, "mine", "our own queue")
    assert known_names("QUEUE") == sorted([*shipped, "mine"])
    assert find("QUEUE", "mine") == tmp_path / "queues" / "mine" / "queue.toml"
    assert load_queue("mine").description == "our own queue"
    assert build_config("default", {"queue": "mine", "workers": 3}).queue == "mine"


def test_a_queue_in_the_working_directory_shadows_the_shipped_one_of_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_queue("model").description != "the team's copy of the model"
    _own_queue(tmp_path, "model", "the team's copy of the model")
    assert find("QUEUE", "model") == tmp_path / "queues" / "model" / "queue.toml"
    assert load_queue("model").description == "the team's copy of the model"
    assert known_names("QUEUE").count("model") == 1


def test_a_queue_given_as_a_path_to_its_directory_or_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _own_queue(tmp_path / "elsewhere", "q", "by path")
    directory = tmp_path / "elsewhere" / "queues" / "q"
    assert find("QUEUE", str(directory)) == directory / "queue.toml"
    assert find("QUEUE", "./elsewhere/queues/q").resolve() == directory / "queue.toml"
    assert find("QUEUE", str(directory / "queue.toml")) == directory / "queue.toml"
    assert "q" not in known_names("QUEUE")  # a path is not a name


def test_a_workload_and_a_sweep_in_the_working_directory_shadow_and_add(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert build_config("steady").workers == 4  # the shipped steady.toml
    (tmp_path / "workloads" / "sweeps").mkdir(parents=True)
    (tmp_path / "workloads" / "steady.toml").write_text("workers = 7\n")
    (tmp_path / "workloads" / "ours.toml").write_text("workers = 9\nwork_ms = 2\n")
    assert build_config("steady").workers == 7
    assert build_config("ours").workers == 9 and build_config("ours").work_ms == 2
    assert "ours" in known_names("WORKLOAD") and known_names("WORKLOAD").count("steady") == 1
    (tmp_path / "workloads" / "sweeps" / "ours.toml").write_text(
        'workload = "ours"\nrepetitions = 1\n[matrix]\nbatch = [1, 2]\n')
    sweep = Sweep.load("ours")
    assert sweep.path == tmp_path / "workloads" / "sweeps" / "ours.toml"
    assert [cfg.batch for _, _, cfg in sweep.cells] == [1, 2] and {cfg.workers for _, _, cfg in sweep.cells} == {9}
    assert find("SWEEP", "batch") == SWEEPS_DIR / "batch.toml"  # the shipped one where there is none of its name


@pytest.mark.parametrize("param, local, shipped", [("WORKLOAD", "workloads", WORKLOADS_DIR),
                                                   ("SWEEP", "workloads/sweeps", SWEEPS_DIR),
                                                   ("QUEUE", "queues", QUEUES_DIR)])
def test_an_unknown_name_is_one_line_naming_where_it_looked_and_what_is_allowed(tmp_path, monkeypatch, param,
                                                                               local, shipped):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        find(param, "no_such_name")
    message = str(err.value)
    assert err.value.param == param and "\n" not in message
    assert f"in ./{local}/ ({tmp_path / local})" in message and f"the shipped ones ({shipped})" in message
    assert "allowed: " + ", ".join(known_names(param)) in message and ", or a path to a " in message
    with pytest.raises(ConfigError) as err:
        find(param, "bad name!")
    assert err.value.param == param and "is not a" in str(err.value) and "letters, digits, - and _" in str(err.value)
    with pytest.raises(ConfigError) as err:
        find(param, str(tmp_path / "absent.toml"))
    assert err.value.param == param and f"no {'queue definition' if param == 'QUEUE' else param.lower()} file" \
        in str(err.value)
