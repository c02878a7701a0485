# queue-bench: `make bench` runs one benchmark, `make test` runs the tests.
# The virtual environment is created and the package installed as a prerequisite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

# A yes/no variable (ALLOW_REMOTE, FRESH, DRY_RUN): 1 = yes; 0 or unset = no; anything else stops make.
flag = $(if $(filter-out 0 1,$($(1))),$(error $(1): '$($(1))' is not allowed; allowed: 1 or 0),$(filter 1,$($(1))))

# Run parameters (same names as `qbench run` options). Empty = workload file value.
WORKLOAD ?= default
POLICY   ?=
WORKERS  ?=
BATCH    ?=
TXN      ?=
WORK_MS  ?=
INDEX    ?=
LAYOUT   ?=
HISTORY  ?=
BACKLOG  ?=
DURATION ?=
WARMUP   ?=
LEASE_S  ?=
WORK_DIST ?=
WORK_SIGMA ?=
WORK_SLOW_MS ?=
SLOW_SHARE ?=
MAX_ATTEMPTS ?=
REAPER_INTERVAL_S ?=
FAIL_PROB ?=
POISON_SHARE ?=
RETRY_BASE_S ?=
RETRY_CAP_S ?=
RATE ?=
ARRIVAL ?=
PRODUCERS ?=
PRIORITY_MIX ?=
FUTURE_SHARE ?=
FUTURE_DELAY_MS ?=
FAULTS ?=
BURSTS ?=
PLAN_CACHE ?=
PREPARED ?=
AUTOVACUUM ?=
SCHEMA   ?=
RESULTS  ?=
DSN      ?=
ALLOW_REMOTE ?=

RUN_ARGS = --workload='$(WORKLOAD)' $(RUN_PARAMS)
RUN_PARAMS = \
	$(if $(POLICY),--policy='$(POLICY)') $(if $(WORKERS),--workers='$(WORKERS)') \
	$(if $(BATCH),--batch='$(BATCH)') $(if $(TXN),--txn='$(TXN)') \
	$(if $(WORK_MS),--work-ms='$(WORK_MS)') $(if $(INDEX),--index='$(INDEX)') $(if $(LAYOUT),--layout='$(LAYOUT)') \
	$(if $(HISTORY),--history='$(HISTORY)') $(if $(BACKLOG),--backlog='$(BACKLOG)') \
	$(if $(DURATION),--duration='$(DURATION)') $(if $(WARMUP),--warmup='$(WARMUP)') \
	$(if $(LEASE_S),--lease-s='$(LEASE_S)') $(if $(SCHEMA),--schema='$(SCHEMA)') \
	$(if $(WORK_DIST),--work-dist='$(WORK_DIST)') $(if $(WORK_SIGMA),--work-sigma='$(WORK_SIGMA)') \
	$(if $(WORK_SLOW_MS),--work-slow-ms='$(WORK_SLOW_MS)') $(if $(SLOW_SHARE),--slow-share='$(SLOW_SHARE)') \
	$(if $(MAX_ATTEMPTS),--max-attempts='$(MAX_ATTEMPTS)') \
	$(if $(REAPER_INTERVAL_S),--reaper-interval-s='$(REAPER_INTERVAL_S)') \
	$(if $(FAIL_PROB),--fail-prob='$(FAIL_PROB)') $(if $(POISON_SHARE),--poison-share='$(POISON_SHARE)') \
	$(if $(RETRY_BASE_S),--retry-base-s='$(RETRY_BASE_S)') $(if $(RETRY_CAP_S),--retry-cap-s='$(RETRY_CAP_S)') \
	$(if $(RATE),--rate='$(RATE)') $(if $(ARRIVAL),--arrival='$(ARRIVAL)') $(if $(PRODUCERS),--producers='$(PRODUCERS)') \
	$(if $(PRIORITY_MIX),--priority-mix='$(PRIORITY_MIX)') $(if $(FUTURE_SHARE),--future-share='$(FUTURE_SHARE)') \
	$(if $(FUTURE_DELAY_MS),--future-delay-ms='$(FUTURE_DELAY_MS)') $(if $(FAULTS),--faults='$(FAULTS)') $(if $(BURSTS),--bursts='$(BURSTS)') \
	$(if $(PLAN_CACHE),--plan-cache='$(PLAN_CACHE)') $(if $(PREPARED),--prepared='$(PREPARED)') \
	$(if $(AUTOVACUUM),--autovacuum='$(AUTOVACUUM)') \
	$(if $(RESULTS),--results='$(RESULTS)') $(if $(DSN),--dsn='$(DSN)') \
	$(if $(call flag,ALLOW_REMOTE),--allow-remote)

.PHONY: bench test calibrate report install clean clean-db sweep compare-indexes capacity compare sweep-report soak report-bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

bench: $(STAMP)
	$(BIN)/qbench run $(RUN_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The harness's memory over a long run (a benchmark, not a test): one run, 10 minutes unless
# DURATION is given; other run parameters pass through. It logs the harness RSS every minute
# and prints it at 1, 5 and 10 minutes, at the end, its peak and its growth per minute
# (summary.json harness_rss_mb).
SOAK_DURATION = 10m
soak: $(STAMP)
	$(BIN)/qbench run $(RUN_ARGS) $(if $(DURATION),,--duration='$(SOAK_DURATION)')

# What a long run's report costs (a benchmark of the report, not of the database): a temporary
# copy of RUN with its measured seconds repeated to RENDER_SECONDS (default one hour), then
# `qbench report` on it and a full read of its claim .hlog, each timed with its peak RSS.
RENDER_SECONDS ?= 3600
report-bench: $(STAMP)
	@test -n '$(RUN)' || { echo "make report-bench: RUN is required; allowed: a results/<run_id> directory" >&2; exit 2; }
	$(BIN)/python -m bench.cli.render_bench '$(RUN)' --seconds='$(RENDER_SECONDS)'

# pgbench and queue-bench on the same claim SQL, same clients, same database, same
# measured window and monitor; CAL_PAIRS pairs A B A B ...; last line: the median ratio.
CAL_WORKERS ?= 50
CAL_DURATION ?= 20s
CAL_WARMUP ?= 5s
CAL_PAIRS ?= 3
calibrate: $(STAMP)
	$(BIN)/qbench calibrate --workers='$(CAL_WORKERS)' --duration='$(CAL_DURATION)' --warmup='$(CAL_WARMUP)' \
		--pairs='$(CAL_PAIRS)' $(if $(RESULTS),--results='$(RESULTS)') $(if $(DSN),--dsn='$(DSN)') $(if $(call flag,ALLOW_REMOTE),--allow-remote)

# A sweep: make sweep SWEEP=index_designs|scaling|batch (or a path to a .toml).
# Run parameters given here apply to every cell (DURATION=10s ...). Running the same
# sweep again resumes the newest unfinished one; FRESH=1 starts over.
SWEEP ?=
REPETITIONS ?=
FRESH ?=
SWEEP_ARGS = $(RUN_PARAMS) $(if $(REPETITIONS),--repetitions='$(REPETITIONS)') $(if $(call flag,FRESH),--fresh)
sweep: $(STAMP)
	@test -n '$(SWEEP)' || { echo "make sweep: SWEEP is required; allowed: $$(ls workloads/sweeps | sed 's/\.toml$$//' | tr '\n' ' ')or a path to a .toml file" >&2; exit 2; }
	$(BIN)/qbench sweep '$(SWEEP)' $(SWEEP_ARGS)

# Every index variant against history 0 / 100k / 1M; prints the comparison report's path.
compare-indexes: $(STAMP)
	$(BIN)/qbench sweep index_designs $(SWEEP_ARGS)

# The highest arrival rate the chosen design sustains (oldest eligible age flat):
# make capacity INDEX=partial WORKERS=20 WORK_MS=5 RATE_START=200
RATE_START ?= 100
capacity: $(STAMP)
	$(BIN)/qbench capacity --rate-start='$(RATE_START)' $(RUN_ARGS)

# Relative differences with a significance test: make compare A=results/<run> B=results/<run>
compare: $(STAMP)
	$(BIN)/qbench compare '$(A)' '$(B)'

# Re-render a sweep's comparison report from its files: make sweep-report SWEEP_DIR=results/sweeps/<id>
sweep-report: $(STAMP)
	$(BIN)/qbench sweep-report '$(SWEEP_DIR)'

# Re-render a report from result files alone: make report RUN=results/<run_id>
report: $(STAMP)
	$(BIN)/qbench report '$(RUN)'

clean:
	rm -rf $(VENV) build *.egg-info

# Drop every schema queue-bench created in DSN's database (run schemas, sweeps' saved states), and only those.
clean-db: $(STAMP)
	$(BIN)/qbench clean $(if $(DSN),--dsn='$(DSN)') $(if $(call flag,DRY_RUN),--dry-run)
