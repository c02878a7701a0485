# queue-bench: `make bench` runs one benchmark, `make test` runs the tests.
# The virtual environment is created and the package installed as a prerequisite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

# A yes/no variable (ALLOW_REMOTE, FRESH, DRY_RUN): 1 = yes; 0 or unset = no; anything else stops make.
flag = $(if $(filter-out 0 1,$($(1))),$(error $(1): '$($(1))' is not allowed; allowed: 1 or 0),$(filter 1,$($(1))))

# Run parameters: every row of the parameter table (bench/config/parameters.py) is a Make variable
# of the same name as its `qbench run` option (WORK_MS for --work-ms); unset or empty = the workload
# file's value, else the table's default. The table gives the list as NAME:--option pairs.
WORKLOAD ?= default
DSN      ?=
ALLOW_REMOTE ?=
PARAM_PAIRS = $(or $(shell $(PYTHON) -m bench.config.parameters make-vars),$(error cannot read the parameter table: $(PYTHON) -m bench.config.parameters make-vars failed))
# A value in single quotes for the shell, its own ' written '"'"' (a DSN password may hold one).
sq = '$(subst ','"'"',$(1))'
param_arg = $(if $($(word 1,$(subst :, ,$(1)))),$(word 2,$(subst :, ,$(1)))=$(call sq,$($(word 1,$(subst :, ,$(1))))))

RUN_ARGS = --workload=$(call sq,$(WORKLOAD)) $(RUN_PARAMS)
RUN_PARAMS = $(strip $(foreach pair,$(PARAM_PAIRS),$(call param_arg,$(pair))) \
	$(if $(DSN),--dsn=$(call sq,$(DSN))) $(if $(call flag,ALLOW_REMOTE),--allow-remote))

.PHONY: bench bench-ui test test-quick experiments calibrate report install clean clean-db sweep compare-indexes capacity plan compare gate sweep-report soak report-bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# STRICT=1: exit 5 when the run is suspect. Exit statuses: README, "Exit statuses".
STRICT ?=
bench: $(STAMP)
	$(BIN)/qbench run $(RUN_ARGS) $(if $(call flag,STRICT),--strict)

# Locust's web UI over one run (http://127.0.0.1:8089/, or WEB_PORT): change the number of workers
# while it runs (up to MAX_WORKERS, default 4 x WORKERS); its Stop ends the measured window and the
# result files and the report are written. DURATION (default UI_DURATION) is the longest it runs.
UI_DURATION = 30m
WEB_PORT ?=
MAX_WORKERS ?=
bench-ui: $(STAMP)
	$(BIN)/qbench run --ui $(RUN_ARGS) $(if $(DURATION),,--duration='$(UI_DURATION)') \
		$(if $(WEB_PORT),--web-port=$(call sq,$(WEB_PORT))) $(if $(MAX_WORKERS),--max-workers=$(call sq,$(MAX_WORKERS)))

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The quick tier (at most 5 minutes on 2 cores): every layer, without the tests marked slow.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

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
	$(BIN)/python -m bench.cli.render_bench $(call sq,$(RUN)) --seconds='$(RENDER_SECONDS)'

# pgbench and queue-bench on the same claim SQL, same clients, same database, same
# measured window and monitor; CAL_PAIRS pairs A B A B ...; last line: the median ratio.
# ENGINE=mariadb: mariadb-slap instead of pgbench, on MariaDB (DSN=mysql://...).
# CAL_PROCESSES=1,2,4 (and/or CAL_WORKERS=50,200 CAL_BATCH=1,10): for each workers x batch, CAL_PAIRS
# rounds of pgbench then queue-bench with each process count; last lines: one median ratio each.
CAL_WORKERS ?= 50
CAL_DURATION ?= 20s
CAL_WARMUP ?= 5s
CAL_PAIRS ?= 3
CAL_BATCH ?=
CAL_PROCESSES ?=
calibrate: $(STAMP)
	$(BIN)/qbench calibrate $(if $(ENGINE),--engine=$(call sq,$(ENGINE))) --workers='$(CAL_WORKERS)' --duration='$(CAL_DURATION)' --warmup='$(CAL_WARMUP)' \
		--pairs='$(CAL_PAIRS)' $(if $(CAL_BATCH),--batch=$(call sq,$(CAL_BATCH))) $(if $(CAL_PROCESSES),--processes=$(call sq,$(CAL_PROCESSES))) \
		$(if $(RESULTS),--results=$(call sq,$(RESULTS))) $(if $(DSN),--dsn=$(call sq,$(DSN))) $(if $(call flag,ALLOW_REMOTE),--allow-remote)

# A sweep: make sweep SWEEP=index_designs|scaling|batch (or a path to a .toml).
# Run parameters given here apply to every cell (DURATION=10s ...). Running the same
# sweep again resumes the newest unfinished one; FRESH=1 starts over.
SWEEP ?=
REPETITIONS ?=
FRESH ?=
SWEEP_ARGS = $(RUN_PARAMS) $(if $(REPETITIONS),--repetitions='$(REPETITIONS)') $(if $(call flag,FRESH),--fresh)
sweep: $(STAMP)
	@test -n '$(SWEEP)' || { echo "make sweep: SWEEP is required; allowed: $$(ls workloads/sweeps | sed 's/\.toml$$//' | tr '\n' ' ')or a path to a .toml file" >&2; exit 2; }
	$(BIN)/qbench sweep $(call sq,$(SWEEP)) $(SWEEP_ARGS)

# The experiments catalogue (workloads/experiments/): each known rule about table-backed queues
# reproduced on this database with a verdict: make experiments [EXPERIMENTS="convoy 5"] [FULL=1].
# The quick tier takes under 10 minutes; FULL=1 runs the long versions (soaks, 1M-row histories).
# Running it again resumes the newest unfinished catalogue run; FRESH=1 starts over.
EXPERIMENTS ?=
FULL ?=
experiments: $(STAMP)
	$(if $(EXPERIMENT),$(error EXPERIMENT is not a variable of make experiments; allowed: EXPERIMENTS="convoy 5"))
	$(BIN)/qbench experiments $(foreach name,$(EXPERIMENTS),$(call sq,$(name))) $(if $(call flag,FULL),--full) $(if $(call flag,FRESH),--fresh) \
		$(if $(RESULTS),--results=$(call sq,$(RESULTS))) $(if $(DSN),--dsn=$(call sq,$(DSN))) $(if $(call flag,ALLOW_REMOTE),--allow-remote)

# Every index variant against history 0 / 100k / 1M; prints the comparison report's path.
compare-indexes: $(STAMP)
	$(BIN)/qbench sweep index_designs $(SWEEP_ARGS)

# The highest arrival rate the chosen design sustains (oldest eligible age flat):
# make capacity INDEX=partial WORKERS=20 WORK_MS=5 RATE_START=200
RATE_START ?= 100
capacity: $(STAMP)
	$(BIN)/qbench capacity --rate-start='$(RATE_START)' $(RUN_ARGS)

# The capacity plan: the fewest workers that meet SLO at RATE, and the headroom above it, for each
# candidate design (comma lists: POLICY=skip_locked,nowait BATCH=1,10); resumes an unfinished plan
# with the same inputs (FRESH=1 starts over). Exit 4 when nothing meets the SLO.
# make plan RATE=500 WORK_MS=5 SLO='pickup_p99<=500ms'
PLAN_MAX_WORKERS ?=
CONFIRM_S ?=
plan: $(STAMP)
	$(BIN)/qbench plan $(RUN_ARGS) $(if $(PLAN_MAX_WORKERS),--plan-max-workers=$(call sq,$(PLAN_MAX_WORKERS))) \
		$(if $(REPETITIONS),--repetitions=$(call sq,$(REPETITIONS))) $(if $(CONFIRM_S),--confirm-s=$(call sq,$(CONFIRM_S))) \
		$(if $(call flag,FRESH),--fresh)

# Relative differences with a significance test: make compare A=results/<run> B=results/<run>
compare: $(STAMP)
	@test -n '$(A)' -a -n '$(B)' || { echo "make compare: A and B are required; allowed: results/<run_id> or results/sweeps/<sweep_id> directories" >&2; exit 2; }
	$(BIN)/qbench compare $(call sq,$(A)) $(call sq,$(B))

# The regression gate for CI: exit 4 when B is worse than A by more than MAX_REGRESSION (default 10%)
# and significantly (p < 0.05) on GATE_METRICS (default throughput,claim_p99).
# make gate A=results/<run> B=results/<run> [MAX_REGRESSION=5%]
MAX_REGRESSION ?= 10%
GATE_METRICS ?=
gate: $(STAMP)
	@test -n '$(A)' -a -n '$(B)' || { echo "make gate: A and B are required; allowed: results/<run_id> or results/sweeps/<sweep_id> directories" >&2; exit 2; }
	$(BIN)/qbench compare $(call sq,$(A)) $(call sq,$(B)) --max-regression=$(call sq,$(MAX_REGRESSION)) \
		$(if $(GATE_METRICS),--gate-metrics=$(call sq,$(GATE_METRICS)))

# Re-render a sweep's comparison report from its files: make sweep-report SWEEP_DIR=results/sweeps/<id>
sweep-report: $(STAMP)
	@test -n '$(SWEEP_DIR)' || { echo "make sweep-report: SWEEP_DIR is required; allowed: a results/sweeps/<sweep_id> directory" >&2; exit 2; }
	$(BIN)/qbench sweep-report $(call sq,$(SWEEP_DIR))

# Re-render a report from result files alone: make report RUN=results/<run_id>
report: $(STAMP)
	@test -n '$(RUN)' || { echo "make report: RUN is required; allowed: a results/<run_id> directory" >&2; exit 2; }
	$(BIN)/qbench report $(call sq,$(RUN))

clean:
	rm -rf $(VENV) build *.egg-info

# Drop every schema queue-bench created in DSN's database (run schemas, sweeps' saved states), and only those.
clean-db: $(STAMP)
	$(BIN)/qbench clean $(if $(DSN),--dsn=$(call sq,$(DSN))) $(if $(call flag,DRY_RUN),--dry-run)
