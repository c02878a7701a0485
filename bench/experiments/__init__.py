"""The experiments catalogue: known rules about table-backed queues, each reproduced with a verdict.

:mod:`bench.experiments.catalogue` reads and validates ``bench/data/workloads/experiments/*.toml``;
:mod:`bench.experiments.driver` runs them (ordinary runs through the sweep driver, or an
engine's probe) and decides each verdict (:mod:`bench.analysis.verdicts`).
"""
