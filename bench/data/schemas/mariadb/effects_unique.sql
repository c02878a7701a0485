-- queue-bench: EFFECTS=idempotent, one effect row per logical job id (INSERT IGNORE skips the others).
ALTER TABLE {schema}.effects ADD UNIQUE KEY logical_id (logical_id);
