# queue-bench: `make bench` runs one benchmark, `make test` runs the tests; `make help` lists the targets.
# The virtual environment is created and the package installed as a prerequisite.
.DEFAULT_GOAL := help
PYTHON ?= python3
# Hints the tool prints name a setting as a make user types it (PROCESSES=2, not --processes 2): bench/usage.py.
export QBENCH_VIA_MAKE = 1
VENV   ?= .venv
BIN     = $(VENV)/bin
# Three installs: what a run needs (STAMP, every run target), what the tests need besides (TEST_STAMP:
# the `test` extra: pytest, selenium, the queue libraries, mkdocs), and the `docs` extra (DOCS_STAMP: make docs).
STAMP   = $(VENV)/.installed
TEST_STAMP = $(VENV)/.installed-test
DOCS_STAMP = $(VENV)/.installed-docs

# A yes/no variable (ALLOW_REMOTE, FRESH, PREPARED, ...): 1 = yes; 0 = no; unset = no, or for a run
# parameter the workload's value; anything else stops make.
flag = $(if $(filter-out 0 1,$($(1))),$(error $(1): '$($(1))' is not allowed; allowed: 1 or 0),$(filter 1,$($(1))))

# Run parameters: every row of the parameter table (bench/config/parameters.py) is a Make variable
# of the same name as its `qbench run` option (WORK_MS for --work-ms); unset or empty = the workload
# file's value, else the table's default. The table gives the list as NAME:--option:kind triples
# (read once); a yes/no (kind flag) is 1 or 0 here and --option / --no-option for qbench.
PARAM_PAIRS = $(eval PARAM_PAIRS := $(or $(shell $(PYTHON) -m bench.config.parameters make-vars),$(error cannot read the parameter table: $(PYTHON) -m bench.config.parameters make-vars failed)))$(PARAM_PAIRS)
PARAM_NAMES = $(foreach triple,$(PARAM_PAIRS),$(word 1,$(subst :, ,$(triple))))
# A value in single quotes for the shell, its own ' written '"'"' (a DSN password may hold one).
sq = '$(subst ','"'"',$(1))'
param_arg = $(call param_arg3,$(subst :, ,$(1)))
param_arg3 = $(if $($(word 1,$(1))),$(if $(filter flag,$(word 3,$(1))),$(if $(call flag,$(word 1,$(1))),$(word 2,$(1)),--no-$(patsubst --%,%,$(word 2,$(1)))),$(word 2,$(1))=$(call sq,$($(word 1,$(1))))))

# ---- Which variables each target reads; one given on the command line that its goal does not read
# ---- stops make with one line (exit 2): `make bench WORKER=50` must not run 10 workers silently.
# RUN_TARGETS read every run parameter of the table (PARAM_NAMES) and RUN_VARS; every target reads
# GLOBAL_VARS and its own list VARS_<target>. A target without a list reads only GLOBAL_VARS.
GLOBAL_VARS = PYTHON VENV
RUN_TARGETS = bench bench-ui soak sweep compare-indexes capacity plan
# Of them, the searches: each sets some run parameters itself (plan: WORKERS; capacity: RATE) and refuses them.
SEARCH_TARGETS = capacity plan
RUN_VARS = DSN ALLOW_REMOTE
VARS_bench = WORKLOAD STRICT
VARS_bench-ui = WORKLOAD WEB_PORT MAX_WORKERS
VARS_soak = WORKLOAD
VARS_sweep = SWEEP REPETITIONS FRESH
VARS_compare-indexes = REPETITIONS FRESH
VARS_capacity = WORKLOAD RATE_START
VARS_plan = WORKLOAD PLAN_MAX_WORKERS REPETITIONS CONFIRM_S FRESH
VARS_calibrate = CAL_WORKERS CAL_DURATION CAL_WARMUP CAL_PAIRS CAL_BATCH CAL_PROCESSES \
	WORKERS DURATION WARMUP BATCH PROCESSES ENGINE RESULTS SCHEMA DSN ALLOW_REMOTE
VARS_experiments = EXPERIMENTS FULL FRESH RESULTS DSN ALLOW_REMOTE
VARS_report = RUN
VARS_report-bench = RUN RENDER_SECONDS
VARS_overhead-bench = DSN OVERHEAD_JOBS OVERHEAD_ROUNDS OVERHEAD_QUEUES WORKERS
VARS_compare = A B
VARS_gate = A B MAX_REGRESSION GATE_METRICS
VARS_sweep-report = SWEEP_DIR
VARS_clean-db = DSN ALLOW_REMOTE DRY_RUN
VARS_install = EXTRAS
GOALS = $(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))
CMDLINE_VARS = $(strip $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
goal_vars = $(VARS_$(1)) $(if $(filter $(1),$(RUN_TARGETS)),$(RUN_VARS) $(PARAM_NAMES))
# Values come from the command line only (qbench itself reads only $DATABASE_URL, refused below): an exported
# WORKERS=200 must not change `make bench` unseen, and `WORKERS=200 make bench` must not run 10 workers.
# A variable the goals read that is set only in the environment stops make with one line (exit 2), and so
# does $DATABASE_URL for a goal that reads DSN (qbench would load that database unasked), and an empty
# value on the command line (DSN=$UNSET_VARIABLE must not mean "the default").
ENV_VARS = $(strip $(foreach v,$(.VARIABLES),$(if $(filter environment,$(origin $(v))),$(v))))
ENV_GIVEN := $(if $(ENV_VARS),$(filter-out $(GLOBAL_VARS),$(filter $(ENV_VARS),$(foreach goal,$(GOALS),$(call goal_vars,$(goal))))))
ifneq ($(ENV_GIVEN),)
$(error $(ENV_GIVEN): set in the environment, which make does not read; allowed: on the command line, make $(GOALS) $(firstword $(ENV_GIVEN))=$($(firstword $(ENV_GIVEN))), or unset $(ENV_GIVEN))
endif
ifneq ($(and $(filter environment,$(origin DATABASE_URL)),$(filter DSN,$(foreach goal,$(GOALS),$(call goal_vars,$(goal)))),$(filter-out command line,$(origin DSN))),)
$(error DATABASE_URL: set in the environment, and make does not pick the database from it; allowed: make $(GOALS) DSN="$$DATABASE_URL", or unset DATABASE_URL for the embedded throwaway server)
endif
CMDLINE_EMPTY = $(strip $(foreach v,$(CMDLINE_VARS),$(if $(strip $($(v))),,$(v))))
ifneq ($(CMDLINE_EMPTY),)
$(error $(CMDLINE_EMPTY): empty; allowed: a value, or leave $(firstword $(CMDLINE_EMPTY)) out for its default)
endif
WORKLOAD ?= default
DSN      ?=
ALLOW_REMOTE ?=
# The refusal's parts: a known name the unknown one begins (WORKER: WORKERS), what the goals read.
did_you_mean = $(foreach v,$(UNKNOWN_VARS),$(if $(filter $(v)%,$(KNOWN_VARS)), (did you mean $(firstword $(filter $(v)%,$(KNOWN_VARS)))?)))
allowed_vars = $(strip $(GLOBAL_VARS) $(foreach goal,$(GOALS),$(VARS_$(goal)) \
	$(if $(filter $(goal),$(RUN_TARGETS)),$(RUN_VARS) and the run parameters (see make help))))
run_only = $(if $(filter $(CMDLINE_VARS),$(PARAM_NAMES)),$(if $(filter-out $(RUN_TARGETS),$(GOALS)), (run parameters apply to $(RUN_TARGETS) only)))
ifneq ($(CMDLINE_VARS),)
KNOWN_VARS := $(GLOBAL_VARS) $(foreach goal,$(GOALS),$(call goal_vars,$(goal)))
UNKNOWN_VARS := $(filter-out $(KNOWN_VARS),$(CMDLINE_VARS))
ifneq ($(UNKNOWN_VARS),)
$(error $(UNKNOWN_VARS): not a variable of make $(GOALS)$(did_you_mean); allowed: $(allowed_vars)$(run_only))
endif
endif

RUN_ARGS = $(strip --workload=$(call sq,$(WORKLOAD)) $(RUN_PARAMS))
RUN_PARAMS = $(strip $(foreach pair,$(PARAM_PAIRS),$(call param_arg,$(pair))) $(DB_ARGS))

.PHONY: help bench bench-ui test experiments calibrate report install test-quick clean distclean clean-db sweep compare-indexes capacity plan compare gate sweep-report soak report-bench overhead-bench docs docs-ref

# The targets, one line each: the `## ` text after a target's prerequisites.
help: ## list the targets (this list)
	@echo "make <target> [VARIABLE=value ...]; a variable the target does not read stops make (exit 2)."
	@awk -F':.*## ' '/^[a-z][a-z-]*:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))
	@echo "Each target's own variables (besides PYTHON, VENV):"
	@$(foreach t,$(sort $(patsubst VARS_%,%,$(filter VARS_%,$(.VARIABLES)))),printf "  %-16s %s\n" '$(t)' '$(strip $(VARS_$(t)) $(if $(filter $(t),$(RUN_TARGETS)),$(RUN_VARS) + the run parameters$(if $(filter $(t),$(SEARCH_TARGETS)), it does not search ($(BIN)/qbench $(t) --help lists them))))';)
	@echo "Run parameters (bench, bench-ui, soak, sweep, compare-indexes, capacity, plan): one Make variable per"
	@echo "qbench run option, WORK_MS=5 for --work-ms 5, yes/no as 1 or 0 (PREPARED=0 for --no-prepared):"
	@echo "$(PARAM_NAMES)" | fold -s -w 98 | sed 's/^/  /'
	@echo "Each is documented, with its default, in docs/reference/parameters.md and by: qbench run --help"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# EXTRAS=procrastinate,pgqueuer (pyproject.toml's extras): what a queue library or other tool needs besides.
EXTRAS ?=
install: $(STAMP) ## create .venv and install queue-bench into it (EXTRAS=procrastinate,pgqueuer: extras too)
	$(if $(EXTRAS),$(BIN)/pip install --quiet -e $(call sq,.[$(EXTRAS)]))

# STRICT=1: exit 5 when the run is suspect. Exit statuses: docs/running.md, "Exit statuses".
STRICT ?=
bench: $(STAMP) ## run one benchmark and render its report (run parameters; STRICT=1: exit 5 when suspect)
	$(BIN)/qbench run $(RUN_ARGS) $(if $(call flag,STRICT),--strict)

# Locust's web UI over one run (http://127.0.0.1:8089/, or WEB_PORT): change the number of workers
# while it runs (up to MAX_WORKERS, default 4 x WORKERS); its Stop ends the measured window and the
# result files and the report are written. DURATION (default UI_DURATION) is the longest it runs.
UI_DURATION = 30m
WEB_PORT ?=
MAX_WORKERS ?=
UI_ARGS = $(strip $(RUN_ARGS) $(if $(DURATION),,--duration='$(UI_DURATION)') \
	$(if $(WEB_PORT),--web-port=$(call sq,$(WEB_PORT))) $(if $(MAX_WORKERS),--max-workers=$(call sq,$(MAX_WORKERS))))
bench-ui: $(STAMP) ## one run under Locust's web UI (WEB_PORT, MAX_WORKERS)
	$(BIN)/qbench run --ui $(UI_ARGS)

# The system packages the tests use (Chromium and its driver, pgbench, mariadb-slap): installed as root,
# else one line naming them and exit 2 before any test (tests/prerequisites.sh).
test: $(TEST_STAMP) ## the full test suite, as CI runs it
	tests/prerequisites.sh
	$(BIN)/python -m pytest -q -rs

# The quick tier: every layer, without the tests marked slow (its time: docs/measurements/test-suite.md).
test-quick: $(TEST_STAMP) ## the quick tier (tests marked slow left out): a few minutes, every layer
	tests/prerequisites.sh
	$(BIN)/python -m pytest -q -rs -m "not slow"

# The harness's memory over a long run (a benchmark, not a test): one run, 10 minutes unless
# DURATION is given; other run parameters pass through. It logs the harness RSS every minute
# and prints it at 1, 5 and 10 minutes, at the end, its peak and its growth per minute
# (summary.json harness_rss_mb).
SOAK_DURATION = 10m
soak: $(STAMP) ## the harness's memory over a long run (10 minutes unless DURATION)
	$(BIN)/qbench run $(RUN_ARGS) $(if $(DURATION),,--duration='$(SOAK_DURATION)')

# What a long run's report costs (a benchmark of the report, not of the database): a temporary
# copy of RUN with its measured seconds repeated to RENDER_SECONDS (default one hour), then
# `qbench report` on it and a full read of its claim .hlog, each timed with its peak RSS.
RENDER_SECONDS ?= 3600
report-bench: $(STAMP) ## what rendering a long run's report costs (RUN=results/<run_id>)
	@test -n '$(RUN)' || { echo "make report-bench: RUN is required; allowed: a results/<run_id> directory" >&2; exit 2; }
	$(BIN)/python -m bench.cli.render_bench $(call sq,$(RUN)) --seconds='$(RENDER_SECONDS)'

# What the tool's measurement costs (a benchmark, not a test): on DSN's database, in rounds, each queue
# library's own worker from its own command line on OVERHEAD_JOBS seeded jobs, then the same worker run
# through the tool at MONITOR=full and MONITOR=stats, and the built-in queue at both; jobs/s of each and
# the ratios (docs/measurements/overhead.md). Needs the libraries: make install EXTRAS=procrastinate,pgqueuer.
OVERHEAD_JOBS ?= 20000
OVERHEAD_ROUNDS ?= 2
OVERHEAD_QUEUES ?= procrastinate,pgqueuer,builtin
overhead-bench: $(STAMP) ## the measurement's cost: a library's own worker against it through the tool (DSN; OVERHEAD_*)
	@test -n '$(DSN)' || { echo "make overhead-bench: DSN is required; allowed: a postgresql:// DSN whose database the runs may use" >&2; exit 2; }
	$(BIN)/python -m bench.cli.overhead_bench --dsn=$(call sq,$(DSN)) --jobs=$(call sq,$(OVERHEAD_JOBS)) \
		--rounds=$(call sq,$(OVERHEAD_ROUNDS)) --queues=$(call sq,$(OVERHEAD_QUEUES)) $(if $(WORKERS),--workers=$(call sq,$(WORKERS)))

# pgbench and queue-bench on the same claim SQL, same clients, same database, same
# measured window and monitor; CAL_PAIRS pairs A B A B ...; last line: the median ratio.
# ENGINE=mariadb: mariadb-slap instead of pgbench, on MariaDB (DSN=mysql://...).
# CAL_PROCESSES=1,2,4 (and/or CAL_WORKERS=50,200 CAL_BATCH=1,10): for each workers x batch, CAL_PAIRS
# rounds of pgbench then queue-bench with each process count; last lines: one median ratio each.
# WORKERS, DURATION, WARMUP, BATCH and PROCESSES mean CAL_WORKERS, ... as well (both, differing: refused).
# $(call cal_arg,NAME,option,default): --option=value of CAL_NAME or NAME, else the default (if any).
cal = $(if $(and $(CAL_$(1)),$($(1)),$(filter-out $(CAL_$(1)),$($(1)))),$(error CAL_$(1) '$(CAL_$(1))' and $(1) '$($(1))' differ; allowed: one of them),$(or $(CAL_$(1)),$($(1)),$(2)))
cal_arg = $(if $(call cal,$(1),$(3)),--$(2)=$(call sq,$(call cal,$(1),$(3))))
CAL_ARGS = $(strip $(if $(ENGINE),--engine=$(call sq,$(ENGINE))) $(call cal_arg,WORKERS,workers,50) $(call cal_arg,DURATION,duration,20s) \
	$(call cal_arg,WARMUP,warmup,5s) $(call cal_arg,PAIRS,pairs,3) $(call cal_arg,BATCH,batch) $(call cal_arg,PROCESSES,processes) \
	$(if $(SCHEMA),--schema=$(call sq,$(SCHEMA))) $(if $(RESULTS),--results=$(call sq,$(RESULTS))) $(DB_ARGS))
DB_ARGS = $(if $(DSN),--dsn=$(call sq,$(DSN))) $(if $(call flag,ALLOW_REMOTE),--allow-remote)
calibrate: $(STAMP) ## pgbench (mariadb-slap) against queue-bench on the same claim SQL (CAL_* or WORKERS, DURATION, ...)
	$(BIN)/qbench calibrate $(CAL_ARGS)

# A sweep: make sweep SWEEP=index_designs|scaling|batch (or a path to a .toml).
# Run parameters given here apply to every cell (DURATION=10s ...). Running the same
# sweep again resumes the newest unfinished one; FRESH=1 starts over.
SWEEP ?=
REPETITIONS ?=
FRESH ?=
SWEEP_ARGS = $(RUN_PARAMS) $(if $(REPETITIONS),--repetitions='$(REPETITIONS)') $(if $(call flag,FRESH),--fresh)
sweep: $(STAMP) ## a matrix of runs with repetitions: SWEEP=index_designs|scaling|batch|<path> (REPETITIONS, FRESH=1)
	@test -n '$(SWEEP)' || { echo "make sweep: SWEEP is required; allowed: $$(ls bench/data/workloads/sweeps | sed 's/\.toml$$//' | tr '\n' ' ')or a path to a .toml file" >&2; exit 2; }
	$(BIN)/qbench sweep $(call sq,$(SWEEP)) $(SWEEP_ARGS)

# The experiments catalogue (bench/data/workloads/experiments/): each known rule about table-backed queues
# reproduced on this database with a verdict: make experiments [EXPERIMENTS="convoy 5"] [FULL=1].
# The quick tier takes under 10 minutes; FULL=1 runs the long versions (soaks, 1M-row histories).
# Running it again resumes the newest unfinished catalogue run; FRESH=1 starts over.
EXPERIMENTS ?=
FULL ?=
EXPERIMENT_ARGS = $(strip $(foreach name,$(EXPERIMENTS),$(call sq,$(name))) $(if $(call flag,FULL),--full) $(if $(call flag,FRESH),--fresh) \
	$(if $(RESULTS),--results=$(call sq,$(RESULTS))) $(DB_ARGS))
experiments: $(STAMP) ## the experiments catalogue, each rule with a verdict (EXPERIMENTS="convoy 5", FULL=1, FRESH=1)
	$(BIN)/qbench experiments $(EXPERIMENT_ARGS)

# Every index variant against history 0 / 100k / 1M; prints the comparison report's path.
compare-indexes: $(STAMP) ## every index variant against history 0 / 100k / 1M (the index_designs sweep)
	$(BIN)/qbench sweep index_designs $(SWEEP_ARGS)

# The highest arrival rate the chosen design sustains (oldest eligible age flat):
# make capacity INDEX=partial WORKERS=20 WORK_MS=5 RATE_START=200
RATE_START ?= 100
capacity: $(STAMP) ## the highest arrival rate a design sustains (RATE_START)
	$(BIN)/qbench capacity --rate-start='$(RATE_START)' $(RUN_ARGS)

# The capacity plan: the fewest workers that meet SLO at RATE, and the headroom above it, for each
# candidate design (comma lists: POLICY=skip_locked,nowait BATCH=1,10); resumes an unfinished plan
# with the same inputs (FRESH=1 starts over). Exit 4 when nothing meets the SLO.
# make plan RATE=500 WORK_MS=5 SLO='pickup_p99<=500ms'
PLAN_MAX_WORKERS ?=
CONFIRM_S ?=
PLAN_ARGS = $(strip $(RUN_ARGS) $(if $(PLAN_MAX_WORKERS),--plan-max-workers=$(call sq,$(PLAN_MAX_WORKERS))) \
	$(if $(REPETITIONS),--repetitions=$(call sq,$(REPETITIONS))) $(if $(CONFIRM_S),--confirm-s=$(call sq,$(CONFIRM_S))) \
	$(if $(call flag,FRESH),--fresh))
plan: $(STAMP) ## the capacity plan: the fewest workers meeting SLO at RATE, and the headroom
	$(BIN)/qbench plan $(PLAN_ARGS)

# Relative differences with a significance test: make compare A=results/<run> B=results/<run>
compare: $(STAMP) ## compare two runs or sweeps: A=results/<run> B=results/<run>
	@test -n '$(A)' -a -n '$(B)' || { echo "make compare: A and B are required; allowed: results/<run_id> or results/sweeps/<sweep_id> directories" >&2; exit 2; }
	$(BIN)/qbench compare $(call sq,$(A)) $(call sq,$(B))

# The regression gate for CI: exit 4 when B is worse than A by more than MAX_REGRESSION (default 10%)
# and significantly (p < 0.05) on GATE_METRICS (default throughput,claim_p99), judged on the repetitions
# of two sweeps; one run on each side cannot be judged (exit 2, "no verdict").
# make gate A=results/sweeps/<id> B=results/sweeps/<id> [MAX_REGRESSION=5%]
MAX_REGRESSION ?= 10%
GATE_METRICS ?=
GATE_ARGS = $(strip --max-regression=$(call sq,$(MAX_REGRESSION)) $(if $(GATE_METRICS),--gate-metrics=$(call sq,$(GATE_METRICS))))
gate: $(STAMP) ## the regression gate for CI: exit 4 when sweep B is worse than sweep A (MAX_REGRESSION, GATE_METRICS)
	@test -n '$(A)' -a -n '$(B)' || { echo "make gate: A and B are required; allowed: results/sweeps/<sweep_id> directories with repetitions" >&2; exit 2; }
	$(BIN)/qbench compare $(call sq,$(A)) $(call sq,$(B)) $(GATE_ARGS)

# Re-render a sweep's comparison report from its files: make sweep-report SWEEP_DIR=results/sweeps/<id>
sweep-report: $(STAMP) ## re-render a sweep's comparison page: SWEEP_DIR=results/sweeps/<id>
	@test -n '$(SWEEP_DIR)' || { echo "make sweep-report: SWEEP_DIR is required; allowed: a results/sweeps/<sweep_id> directory" >&2; exit 2; }
	$(BIN)/qbench sweep-report $(call sq,$(SWEEP_DIR))

# Re-render a report from result files alone: make report RUN=results/<run_id>
report: $(STAMP) ## re-render a run's report from its files: RUN=results/<run_id>
	@test -n '$(RUN)' || { echo "make report: RUN is required; allowed: a results/<run_id> directory" >&2; exit 2; }
	$(BIN)/qbench report $(call sq,$(RUN))

# Two kinds of cleaning, each with a name of its own: distclean (this checkout's files) and clean-db
# (a database's schemas, as `qbench clean`). A bare `clean` would mean one of them by guess: it asks.
clean: ## says which to use: distclean or clean-db
	$(error make clean: say which; allowed: make distclean (removes .venv and build files) or make clean-db DSN=... (drops queue-bench's schemas in that database, as qbench clean))

distclean: ## remove the virtual environment and build files (.venv, build, *.egg-info)
	rm -rf $(VENV) build *.egg-info

# Drop every schema queue-bench created in DSN's database (run schemas, sweeps' saved states), and only those.
clean-db: $(STAMP) ## drop the schemas queue-bench created in DSN's database, and only those (DRY_RUN=1: list them)
	$(BIN)/qbench clean $(strip $(DB_ARGS) $(if $(call flag,DRY_RUN),--dry-run))

# The documentation site (MkDocs, strict: a broken link or a page missing from the nav fails) into site/;
# docs-ref regenerates the parameters and CLI references (docs/reference/) from the code.
docs: $(DOCS_STAMP) ## build the documentation site into site/ (strict: a broken link fails)
	$(BIN)/python -m mkdocs build --strict --site-dir site
docs-ref: $(STAMP) ## regenerate docs/reference/ (parameters, CLI) from the code
	$(BIN)/python -m bench.cli.docs_reference
