"""``bench.sweep``: one layer of queue-bench (see docs/architecture.md)."""
