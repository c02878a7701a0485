"""``bench.engines.postgres``: one layer of queue-bench (see docs/architecture.md)."""
