# Streamwarden: `make run` brings the local platform up; `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run rehearse install-cluster test lint typecheck pytest install clean bench bench-watermarks bench-standby bench-stage profile longrun soak

# uv installs the pinned stack in a third of pip's time (parallel downloads).
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==0.13.9
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# Every process started from here writes the bytecode of what it imports, once. Where PYTHONDONTWRITEBYTECODE is
# set (as on the CI machines) Python never writes it and uv compiles none at install, so each process (each Airflow
# task, each Spark Python worker, each command) compiled every module it imported again: importing Airflow, PySpark
# and pandas took 10.2 CPU-s without bytecode, 4.8 with it, and the test suite about 1.5x as long. Compiling the
# whole venv at install instead took 56 s on 2 cores, mostly for packages no process imports.
export PYTHONDONTWRITEBYTECODE :=

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamwarden up

# The production rehearsal: PostgreSQL, Airflow's four components, a Spark standalone master and two workers, an S3
# server, the stream host (sshd), every part its own process on loopback (docs/deployment.md). Needs the PostgreSQL
# and OpenSSH servers, which install-cluster installs from Debian's packages when missing (with sudo when not root).
rehearse: install-cluster $(STAMP)
	$(BIN)/streamwarden up --topology cluster

install-cluster:
	@.ci/install-debian-packages postgresql openssh-server

lint: $(STAMP)
	$(BIN)/ruff check include plugins jobs dags tests $(wildcard bench)

typecheck: $(STAMP)
	$(BIN)/mypy include plugins jobs dags $(wildcard bench)

# Three workers: the drill files in two units (the stream's, Airflow's), one on each of two workers, the others on
# the third and on the first free (tests/conftest.py); every test's duration goes to test-results/junit.xml. In this process alone:
# make pytest PYTEST_WORKERS=0 PYTEST_ARGS=tests/...
PYTEST_WORKERS ?= 3
pytest: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -n $(PYTEST_WORKERS) \
		--junit-xml=test-results/junit.xml $(PYTEST_ARGS)

# The type check runs beside the tests: its minute of CPU fits in what the workers' waits leave over.
test: lint
	$(MAKE) --no-print-directory -j2 typecheck pytest

clean:
	rm -rf $(VENV) .streamwarden .mypy_cache .ruff_cache .pytest_cache

# Benchmarks (not part of `make test`): baseline, Quix Streams and Streamwarden on one seeded workload.
# Smaller: make bench BENCH_ARGS="--messages 200000 --skip-scaling"
bench: $(STAMP)
	test -x bench/.quix-venv/bin/python || $(PYTHON) -m venv bench/.quix-venv
	bench/.quix-venv/bin/python -m pip install --quiet -r bench/requirements-quix.txt
	PYTHONPATH=bench $(BIN)/python -m streamwarden_bench $(BENCH_ARGS)

# The long run (not part of `make test`, which runs a 5-minute one): `make run`'s platform headless under a CPU
# burn, memory per process role, disk, stream deaths, red DAG runs and batch gaps; docs/longrun.md.
# Shorter: make longrun LONGRUN_ARGS="--minutes 20"
longrun: $(STAMP)
	PYTHONPATH=bench $(BIN)/python -m streamwarden_longrun $(LONGRUN_ARGS)

# The soak (not part of `make test`, which runs a short one): the platform of `make run` for an hour under a seeded
# plan of faults, then a verdict on every offset, session, alert and process; docs/soak.md.
# Other seeds, rates, lengths: make soak SOAK_ARGS="--seed 7 --faults-per-hour 120 --minutes 30"
soak: $(STAMP)
	PYTHONPATH=bench $(BIN)/python -m streamwarden_soak $(SOAK_ARGS)

# kill -9 of the stream healed by a warm standby, against a restart (results in bench/results/standby/; about 15
# minutes): make bench-standby BENCH_ARGS="--kills 20"
bench-standby: $(STAMP)
	PYTHONPATH=bench $(BIN)/python -m streamwarden_bench.standby $(BENCH_ARGS)

# The session stage's Python per record without Spark (seconds): make bench-stage BENCH_ARGS="--compare-ref HEAD~1"
bench-stage: $(STAMP)
	PYTHONPATH=bench $(BIN)/python -m streamwarden_bench.stage_cpu $(BENCH_ARGS)

# Where the stream's CPU goes while it reads a backlog: py-spy on every Python process, Java Flight Recorder on the
# driver JVM (results in bench/results/profile/; about 3 minutes).
profile: $(STAMP)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r bench/requirements-profile.txt
	PYTHONPATH=bench $(BIN)/python -m streamwarden_bench.profile $(BENCH_ARGS)

# The source's watermark query per trigger at a log of 15 minutes of demo traffic and at ten times that
# (results in bench/results/watermarks/; about 15 minutes).
bench-watermarks: $(STAMP)
	PYTHONPATH=bench $(BIN)/python -m streamwarden_bench.watermark_cost $(BENCH_ARGS)
