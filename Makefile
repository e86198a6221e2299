# `make demo` and `make test` do all set-up on a fresh machine: they create .venv from the pinned files.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin

# Airflow runs entirely inside the project: config, SQLite metadata DB and logs in .airflow/,
# the local object store, CPFS stand-in, job run directories and artifacts in .demo/.
export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION := True
export ALIYUN_TRAINING_LOCAL_ROOT := $(CURDIR)/.demo
export PYTHONPATH := $(CURDIR)/plugins
export PATH := $(BIN):$(PATH)
# The LocalExecutor of `make ui` forks this many workers at once (Airflow's default, 32, is about
# 6 GB): twice the cores, at least 4. A value set in the environment wins.
export AIRFLOW__CORE__PARALLELISM ?= $(shell cores=$$(nproc); echo $$(( 2 * cores > 4 ? 2 * cores : 4 )))

.PHONY: demo ui check test browser lint style bench lock clean

# pip only bootstraps uv (its pin in constraints.txt), which installs the locked set several times
# faster and, like pip, compiles it to bytecode. torch stays with pip: pip's configuration (a local
# wheel directory, PyTorch's CPU index) is what finds its CPU build, and uv reads none of it.
$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-training.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode \
		-r requirements.txt -r requirements-dev.txt -c constraints.txt
	$(BIN)/pip install --quiet -r requirements-training.txt
	touch $@

# The project itself, installed editable: its dist-info in .venv carries pyproject's entry points,
# which is how every Airflow command finds the provider (the alibaba_cloud connection type and
# form, the links, the triggers) and its plugin (the pages), as in a deployment with the wheel.
# Its .pth file names plugins/, the directory PYTHONPATH names, so the package is still imported
# once, from there. Reinstalled when pyproject.toml (the entry points, the metadata) changes.
# setuptools also leaves a copy of the metadata in plugins/ (aliyun_training_pipelines.egg-info),
# on sys.path: Airflow would load the plugin's entry point from both, the second an import error.
$(VENV)/.editable: $(VENV)/.installed pyproject.toml
	$(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps -e .
	rm -rf plugins/aliyun_training_pipelines.egg-info
	touch $@

# `make demo PIPELINE=imagenet_resnet_retrain` runs the second example (shards, then a ResNet).
# The run's logical date is now (so the UI shows its true duration); its dataset version is named.
# The examples make a synthetic version first; any other declared pipeline trains on the newest
# version already in the local object store, with its form's defaults.
# The examples' version is 2026-11-22 the first time, then the week after the newest one already
# made (include/demo_version.py): each `make demo` trains on new data, and the gate decides whether
# its model replaces the champion. DEMO_DATE=YYYY-MM-DD names one. The version is worked out once,
# where it is first used (the $(eval) keeps it), before the demo makes it.
PIPELINE ?= cifar10_retrain
ifeq ($(PIPELINE),imagenet_resnet_retrain)
DEMO_DATE ?= $(eval DEMO_DATE := $(shell python3 include/demo_version.py .demo/object-store/imagenet))$(DEMO_DATE)
DEMO_DATA = python include/imagenet_resnet/make_synthetic_raw.py --out .demo/object-store/imagenet/$(DEMO_DATE)
DEMO_CONF = {"dataset_version": "$(DEMO_DATE)", "nodes": 2, "epochs": 2}
else ifeq ($(PIPELINE),cifar10_retrain)
DEMO_DATE ?= $(eval DEMO_DATE := $(shell python3 include/demo_version.py .demo/object-store/cifar10))$(DEMO_DATE)
DEMO_DATA = python include/training/make_synthetic_cifar10.py --out .demo/object-store/cifar10/$(DEMO_DATE)
DEMO_CONF = {"dataset_version": "$(DEMO_DATE)", "nodes": 2, "epochs": 3}
else
DEMO_CONF := {}
endif
# The examples' summary reads their metrics (test accuracy); another pipeline's run prints the
# path of its manifest.json, the summary's last line too.
DEMO_SUMMARY := $(if $(DEMO_DATA),python include/demo_summary.py --artifacts .demo/artifacts/$$model \
	--since .demo/.demo-started --registry .demo/mlflow/mlflow.db,find .demo/artifacts/$$model -mindepth 3 -maxdepth 3 -name manifest.json \
	-newer .demo/.demo-started | grep .)

# `airflow dags test` and `make ui` share the SQLite database, and the UI's scheduler would run the
# test's tasks too: a demo is refused while the UI runs (its pid is in $(UI_PID)).
UI_PID := $(AIRFLOW_HOME)/standalone.pid

demo: $(VENV)/.editable
	@if test -f $(UI_PID) && kill -0 "$$(cat $(UI_PID))" 2>/dev/null; then \
		echo "make ui is running on this project (pid $$(cat $(UI_PID))): trigger $(PIPELINE) there," \
			"or stop it (Ctrl-C) before make demo" >&2; exit 1; fi
	airflow db migrate > /dev/null
	$(DEMO_DATA)
	model=$$(python include/demo_pipeline.py '$(PIPELINE)') && touch .demo/.demo-started && \
	{ airflow dags test $(PIPELINE) -c '$(DEMO_CONF)' > .demo/dags-test.log 2>&1 \
		|| { tail -n 60 .demo/dags-test.log; exit 1; }; } && \
	$(DEMO_SUMMARY)

# The UI on http://localhost:$(UI_PORT): `airflow standalone` with the project's settings. It prints
# the admin password (also in .airflow/simple_auth_manager_passwords.json.generated). The tasks
# reach the API at AIRFLOW__API__BASE_URL, which must name the same port or they stay queued.
# Ctrl-C, or SIGTERM to make, stops every component. standalone runs in a process group of its
# own (set -m) and stops only on a Ctrl-C of its own, which a shell that started make in the
# background would have it ignore; so the recipe does what standalone does then: SIGTERM to each
# component, whose output standalone still prints, and once nothing of its group but standalone is
# alive (at most 30 s), SIGTERM to the group, then SIGKILL to what is left of it after 5 s more.
UI_PORT ?= 8080
ui: $(VENV)/.editable
	airflow db migrate > /dev/null
	@set -m; \
	AIRFLOW__API__PORT=$(UI_PORT) AIRFLOW__API__BASE_URL=http://localhost:$(UI_PORT) airflow standalone & \
	standalone=$$!; set +m; echo $$standalone > $(UI_PID); \
	alive() { ps -A -o pgid= -o pid= -o stat= | awk -v g=$$standalone -v but="$$1" \
		'$$1 == g && $$2 != but && $$3 !~ /^Z/' | grep -q .; }; \
	trap stopping=1 INT TERM HUP; wait $$standalone; status=$$?; trap '' INT TERM HUP; \
	pkill -TERM -P $$standalone; \
	for _ in $$(seq 30); do alive $$standalone || break; sleep 1; done; \
	kill -TERM -- -$$standalone 2>/dev/null; \
	for _ in $$(seq 5); do alive || break; sleep 1; done; \
	kill -KILL -- -$$standalone 2>/dev/null; rm -f $(UI_PID); test -n "$$stopping" || exit $$status

# The suite mostly waits (deployments, polls, subprocesses), so it runs on more pytest-xdist workers
# than there are cores; each end-to-end module keeps one worker, and its deployment, to itself.
TEST_WORKERS ?= 4

# The suite starts hundreds of Python processes (xdist workers, task runners, torchrun ranks, jobs)
# that import the package and the tests: with bytecode cached in __pycache__ (ignored by git), each
# module is compiled, and each test module's asserts rewritten, once instead of in every process.
unexport PYTHONDONTWRITEBYTECODE

# The inner loop, at most a minute on a quiet 2-core machine: the style checks, mypy (incremental:
# seconds once .mypy_cache holds its first run) and every test not marked slow or e2e (the unit tests,
# the emulators' and the quick integration tests against them), beside each other.
CHECK_WORKERS ?= 2
check: $(VENV)/.editable style
	mypy > .mypy-check.log 2>&1 & typecheck=$$!; \
	python -m pytest -q -n $(CHECK_WORKERS) -m "not slow and not e2e" --durations=5 tests; tests=$$?; \
	wait $$typecheck; typed=$$?; cat .mypy-check.log; rm -f .mypy-check.log; \
	test $$tests -eq 0 && test $$typed -eq 0

# mypy's first run over the package and the Airflow it types against takes about a minute of one
# core; make test runs it beside the tests (which leave a core idle while they wait) and fails when
# either fails, printing mypy's report.
test: $(VENV)/.installed browser style
	mypy > .mypy.log 2>&1 & typecheck=$$!; \
	python -m pytest -n $(TEST_WORKERS); tests=$$?; \
	wait $$typecheck; typed=$$?; cat .mypy.log; rm -f .mypy.log; \
	test $$tests -eq 0 && test $$typed -eq 0

# The end-to-end suite signs in and clicks through the UI in Debian's Chromium, headless, through
# its ChromeDriver: installed with apt (as root, else through sudo) where they are missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BROWSER_PACKAGES := chromium chromium-driver
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
		$(SUDO) apt-get install -y -q --no-install-recommends $(BROWSER_PACKAGES) \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $(BROWSER_PACKAGES); }; }

lint: style
	mypy

# Formatting, lint rules and the import-direction contracts: seconds.
style: $(VENV)/.installed
	ruff check .
	ruff check --select AIR .
	ruff format --check .
	lint-imports

# parse_time.py misses its cold-parse limit with 50 declared pipelines (docs/benchmarks.md): its
# failure is shown and the other benchmarks still run.
bench: $(VENV)/.installed
	-python bench/parse_time.py
	PYTHONPATH=plugins:. python bench/preflight.py
	PYTHONPATH=plugins:. python bench/trigger_scale.py
	PYTHONPATH=plugins:. python bench/trigger_scale.py --running
	PYTHONPATH=plugins:. python bench/staging.py
	PYTHONPATH=plugins:. python bench/monitoring_cost.py

# Regenerate the transitive lock after changing requirements.txt or requirements-dev.txt.
lock: $(VENV)/.installed
	uv pip compile requirements.txt requirements-dev.txt -o constraints.txt --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --no-header --quiet

clean:
	rm -rf .airflow .demo
