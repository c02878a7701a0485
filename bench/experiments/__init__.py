"""The experiments catalogue: known rules about table-backed queues, each reproduced with a verdict
(``catalogue`` reads the files, ``driver`` runs them)."""
