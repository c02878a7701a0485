-- TENANTS > 1: the turn counter of the round-robin claim (TENANT_ORDER=round_robin): one nextval
-- per claim names the tenant served first (bench/engines/postgres/builtin_queue.py, _ROUND_ROBIN_PICK).
-- Created in both orders, so plain and round-robin runs have the same objects.
CREATE SEQUENCE {schema}.queue_turn_seq;
