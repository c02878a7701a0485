"""queue-bench: load benchmark and capacity-planning tool for job queues kept in a database table."""

__version__ = "0.1.0"
