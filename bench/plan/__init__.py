"""The capacity plan: the fewest workers that meet an SLO at a target rate, the headroom above it,
across candidate designs (``qbench plan``, ``make plan``)."""
