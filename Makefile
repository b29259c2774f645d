# Two commands on a fresh machine: `make demo` and `make test`. Both do their own set-up
# (Python environment from uv.lock, JVM jars from Maven) when it is missing or stale.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV_VERSION := 0.13.8
STATE      := .ingest
TOOLS      := $(STATE)/tools
UV         := $(TOOLS)/bin/uv
VENV       := .venv
BIN        := $(VENV)/bin
VENV_STAMP := $(VENV)/.synced
JARS_STAMP := $(STATE)/jars/.complete
# The Spark drivers' class-data archive (spark_jobs/class_data_archive.py): made from the
# venv's pyspark and the jars, so recorded again when either changes. It only saves start
# time: a failed recording is printed, set-up goes on, and it is tried again with the next
# venv or jars.
CDS_STAMP  := $(STATE)/jars/cds/.attempted
# What `make jars` builds from: the POMs and the platform's own Java (include/maven/localfs,
# include/maven/logstore).
POMS       := include/maven/pom.xml include/maven/spark/pom.xml include/maven/kafka/pom.xml \
              include/maven/localfs/pom.xml $(wildcard include/maven/localfs/src/main/java/io/ingest/hadoop/*.java) \
              include/maven/logstore/pom.xml $(wildcard include/maven/logstore/src/main/java/io/ingest/delta/*.java)
PYTEST_ARGS ?=
# Two pytest workers, one per core: the suite is CPU-bound (JVMs), and three workers took 22:19
# against two's 20:36 (bench/results/REFERENCE.md, 2026-12-04). --dist loadfile keeps a file's
# module fixtures (one Airflow, one platform) on one worker. xdist starts the files with the
# most tests first; starting tests/e2e/test_medallion_dag.py first instead was slower (30:17 vs
# 27:13 in a fresh clone): its backfill (8 intervals then, 3 now) with a real scheduler then ran beside the
# integration tests and took twice as long. Tried again on 2026-12-07 (--no-loadscope-reorder,
# collection order, e2e first): CI took 30:37 against 29:19 with the default. TEST_WORKERS=0
# runs serially.
TEST_WORKERS ?= 2

# uv uses the machine's Python 3.11 and never downloads an interpreter.
export UV_PYTHON := python3.11
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Compile .pyc at install time: every spark-submit, gate and Airflow process imports pyspark,
# Great Expectations and Airflow afresh, and without bytecode (PYTHONDONTWRITEBYTECODE is
# common in CI images) that costs ~9 s more per start (bench/README.md).
export UV_COMPILE_BYTECODE := 1

.PHONY: help setup prereqs jars browser demo demo-down test test-faults lint typecheck unit integration clean-kafka \
        kafka-up kafka-down kafka-status kafka-cluster-up kafka-cluster-down spark-cluster-up spark-cluster-down cluster-up cluster-down \
        postgres-up postgres-down postgres-status clean-data \
        bench docs soak soak-smoke

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-20s %s\n", $$1, $$2}'

prereqs:
	@include/scripts/check_prereqs.sh

$(UV): | prereqs
	python3.11 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV_STAMP): pyproject.toml uv.lock | $(UV)
	$(UV) sync --locked
	@touch $@

# Maven resumes from its local repository; -U retries downloads that failed before.
$(JARS_STAMP): $(POMS) | prereqs
	rm -rf $(STATE)/jars
	# jansi.noreset: Debian's Maven 3.8 prints colour resets (ESC[0m) at exit even in batch mode.
	MAVEN_OPTS="$${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -B -q -U -Dstyle.color=never -f include/maven/pom.xml package
	@touch $@

$(CDS_STAMP): $(VENV_STAMP) $(JARS_STAMP)
	$(BIN)/python -m spark_jobs.class_data_archive \
	  || echo "class-data archive not recorded (above): Spark drivers start without it"
	@mkdir -p $(@D) && touch $@

setup: prereqs $(VENV_STAMP) $(JARS_STAMP) $(CDS_STAMP) ## Python environment (uv.lock), JVM jars (Maven), the drivers' class-data archive

jars: $(JARS_STAMP) ## Fetch the JVM jars into .ingest/jars (once)

# The Streaming page's test drives Debian's Chromium with Playwright (no browser downloads).
browser: ## Debian's chromium for the browser tests (installed when missing)
	@include/scripts/install_chromium.sh

AIRFLOW_PORT ?= 8080

demo: setup ## Run the platform under Airflow on embedded defaults (UI port: AIRFLOW_PORT=8080)
	$(BIN)/ingestctl demo --port $(AIRFLOW_PORT)

demo-down: ## Stop what `make demo` started (Airflow, the always-on jobs, Kafka, PostgreSQL)
	$(BIN)/ingestctl demo-down

lint: $(VENV_STAMP) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV_STAMP) ## mypy
	$(BIN)/mypy ingest_core ingestctl spark_jobs plugins/ingest_platform $(wildcard dags/*.py)

test: setup browser lint typecheck ## Lint, type-check and run the suite (starts its own Kafka and PostgreSQL)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The long fault proofs `make test` leaves out (marker `faults`, docs/tests.md): kill -9 of
# brokers, workers and drivers, a Spark task killed three ways through Airflow's task runner.
test-faults: setup ## The long fault proofs make test leaves out (about 6 minutes; docs/tests.md)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --run-faults -m faults $(PYTEST_ARGS)

unit: setup ## Unit tests only (no services)
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

integration: setup ## Integration tests (real Kafka, Spark, Delta)
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

kafka-up: setup ## Start the platform's Kafka broker (127.0.0.1:9092 unless INGEST_KAFKA__PORT)
	$(BIN)/ingestctl kafka up

kafka-down: $(VENV_STAMP) ## Stop the broker this platform started
	$(BIN)/ingestctl kafka down

kafka-status: $(VENV_STAMP) ## Is the platform's broker running?
	$(BIN)/ingestctl kafka status

# The local-cluster profile's three brokers and Spark standalone cluster (docs/deployment.md):
# every ingestctl command and job run with INGEST_PROFILE=local-cluster uses them.
kafka-cluster-up: setup ## Start three replicated brokers (127.0.0.1:19092-19094, profile local-cluster)
	INGEST_PROFILE=local-cluster $(BIN)/ingestctl kafka up

kafka-cluster-down: $(VENV_STAMP) ## Stop the local-cluster profile's brokers
	INGEST_PROFILE=local-cluster $(BIN)/ingestctl kafka down

spark-cluster-up: setup ## Start a Spark master and two workers (spark://127.0.0.1:17077, profile local-cluster)
	INGEST_PROFILE=local-cluster $(BIN)/ingestctl spark up

spark-cluster-down: $(VENV_STAMP) ## Stop the local-cluster profile's Spark master and workers
	INGEST_PROFILE=local-cluster $(BIN)/ingestctl spark down

cluster-up: kafka-cluster-up spark-cluster-up ## Both clusters of the local-cluster profile

cluster-down: spark-cluster-down kafka-cluster-down ## Stop both clusters of the local-cluster profile

# The embedded PostgreSQL (Airflow's metadata database): `make demo` starts it by itself.
postgres-up: $(VENV_STAMP) ## Start the embedded PostgreSQL (socket in .ingest/postgres/run)
	$(BIN)/ingestctl postgres up

postgres-down: $(VENV_STAMP) ## Stop the embedded PostgreSQL
	$(BIN)/ingestctl postgres down

postgres-status: $(VENV_STAMP) ## Is the embedded PostgreSQL running?
	$(BIN)/ingestctl postgres status

# Benchmarks (bench/README.md): never fail a build. ARGS=--full for the 1M-event version.
ARGS ?=
bench: setup ## Benchmarks: small (<10 min); ARGS=--full for 1M events and the demo's memory
	-$(BIN)/python -m bench $(ARGS)

# The soak (docs/soak.md): about 30 minutes by default; exits 1 when its verdict fails.
soak: setup ## The platform under seeded faults, judged (ARGS=--minutes 120 --faults 200; docs/soak.md)
	$(BIN)/ingestctl soak $(ARGS)

soak-smoke: setup ## The short soak as a test: 100 s, three fault kinds, fixed seed (8-9 min; not in `make test`)
	$(BIN)/pytest --run-soak tests/e2e/test_soak.py $(PYTEST_ARGS)

docs: $(VENV_STAMP) ## Build the documentation (docs/, mkdocs.yml) into build/site, strict
	$(BIN)/mkdocs build --strict --site-dir build/site

clean-data: ## Delete Delta tables and checkpoints (keeps jars, venv and Kafka data)
	rm -rf $(STATE)/data $(STATE)/checkpoints

clean-kafka: $(VENV_STAMP) ## Delete the broker's topics, records and logs; refused while it runs
	$(BIN)/ingestctl kafka clean

# --- deployment (docker-compose.yaml, Dockerfile; README "Running on a cluster") ----------
.PHONY: deploy-check image

deploy-check: $(VENV_STAMP) ## Validate Dockerfile and docker-compose.yaml (no Docker engine needed)
	$(BIN)/pytest -q tests/unit/test_compose.py tests/unit/test_dockerfile.py

image: ## Build the platform's image (needs a Docker engine with BuildKit)
	docker build -t $${INGEST_IMAGE:-ingest-platform:latest} .
