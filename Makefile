# lambdalake: `make demo` and `make test` are the whole quick start; both call `make setup`.
PY      := .venv/bin/python
JARS    := .cache/jars
# uv installs the lock into the venv, compiled to bytecode as pip does it (a process that cannot write
# it, e.g. under PYTHONDONTWRITEBYTECODE, would compile every module it imports again)
UV      := .venv/bin/uv pip
MVN     := mvn -q -B -s $(CURDIR)/infra/jvm/settings.xml
export PYTHONPATH := $(CURDIR)

.PHONY: setup lint demo test test-fast bench up down status debian

SUDO    := $(if $(filter 0,$(shell id -u)),,sudo)
# Two steps at a time: the venv beside the jars, then the class archive beside the lint.
MAKEFLAGS += --jobs=2

# Any version's initdb that Debian's PostgreSQL installed.
INITDB  := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb))
# What setup installs from Debian, of what is missing: the headless Chromium and its WebDriver, for the
# browser tests (the dashboard, the Airflow UI); PostgreSQL's server, for Airflow's metadata database
# when the setting airflow_database is "postgresql" (infra/postgres.py; the tests run one).
DEBIAN  := $(if $(wildcard /usr/bin/chromedriver),,chromium chromium-driver) $(if $(INITDB),,postgresql)

setup: .venv/.installed $(JARS)/.resolved .cache/spark-classes.jsa $(if $(strip $(DEBIAN)),debian)

# One apt-get for all of them (two at once would wait on each other's lock).
debian:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBIAN)

.venv/.installed: requirements.txt pyproject.toml
	test -x $(PY) || python3.11 -m venv .venv
	$(PY) -m pip install -q pip==26.3 uv==0.13.9
	$(UV) install -q --compile-bytecode --python $(PY) -r requirements.txt
	$(UV) install -q --python $(PY) --no-deps -e .
	$(UV) check --python $(PY)
	touch $@

$(JARS)/.resolved: $(wildcard infra/jvm/*/pom.xml) infra/jvm/settings.xml
	rm -rf $(JARS)/spark $(JARS)/kafka $(JARS)/s3proxy
	cd infra/jvm/spark && $(MVN) dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory=$(CURDIR)/$(JARS)/spark
	cd infra/jvm/s3a && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JARS)/spark
	cd infra/jvm/kafka && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JARS)/kafka
	cd infra/jvm/s3proxy && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JARS)/s3proxy
	touch $@

# Spark's classes as its JVM loads them, for every driver JVM to map at start (infra/class_archive.py).
.cache/spark-classes.jsa: .venv/.installed $(JARS)/.resolved
	$(PY) -m infra.class_archive

demo: setup
	$(PY) -m lambdalake.demo $(if $(DOMAIN),--domain $(DOMAIN))

# ruff's lint and format check, then mypy (their settings: pyproject.toml); they need only the venv.
lint: .venv/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: setup lint
	$(PY) -m pytest -q --durations=12 -n 2 --no-loadscope-reorder

test-fast: setup lint
	$(PY) -m pytest -q tests/unit -m "not processes"

bench: setup
	$(PY) -m bench

up: setup
	.venv/bin/lambdalake up

down:
	.venv/bin/lambdalake down

status:
	.venv/bin/lambdalake status
