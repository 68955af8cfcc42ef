# chatplatform — `make demo` starts everything (embedded mode); `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export DJANGO_SETTINGS_MODULE ?= config.settings.local

.PHONY: demo install install-dev migrate seed serve worker test test-services lint bench clean vendor messages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

migrate: install
	$(BIN)/python manage.py migrate --noinput

seed: migrate
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py collectstatic --noinput -v 0

## demo: create the venv, install, migrate, seed, and serve on $(HOST):$(PORT) (embedded mode)
demo: seed
	@echo "chatplatform on http://$(HOST):$(PORT)/  (sign in as alice; Ctrl-C stops)"
	$(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

## worker: a Celery worker for production mode (needs REDIS_URL)
worker: install
	$(BIN)/celery -A config worker --pool threads --concurrency $${WORKER_CONCURRENCY:-32} --loglevel INFO \
		--without-gossip --without-mingle --without-heartbeat

## test: the whole suite; PostgreSQL/Redis/Celery tests run when reachable (required with CI=true)
test: install-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	DJANGO_SETTINGS_MODULE=config.settings.test $(BIN)/python -m pytest -q -m "not services" \
		-n $${TEST_PROCESSES:-2} --dist loadfile --durations=15
	DJANGO_SETTINGS_MODULE=config.settings.test $(BIN)/python tests/run_services.py \
		-n $${TEST_PROCESSES:-2} --dist loadfile --durations=15

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports

## bench: the side-by-side streaming benchmark (embedded and production) with ratios to the
## stored Open WebUI baseline; BENCH_ARGS="--points 10x1000x50 --modes production" narrows it
bench: install-dev
	$(BIN)/python bench/side_by_side/run.py $(BENCH_ARGS)

## vendor: rebuild templates/static/vendor/ (chat-vendor.js; preview-vendor.js, Mermaid for the artifact
## preview frame only) from frontend/package-lock.json (needs Node.js; the
## output is committed, so demo and test never need Node)
vendor:
	cd frontend && npm ci --no-audit --no-fund --ignore-scripts && npm rebuild esbuild
	cd frontend && node_modules/.bin/esbuild vendor-entry.js --bundle --format=esm --minify \
		--legal-comments=eof --outfile=../templates/static/vendor/chat-vendor.js
	cd frontend && node_modules/.bin/esbuild preview-vendor-entry.js --bundle --format=iife --minify \
		--legal-comments=eof --outfile=../templates/static/vendor/preview-vendor.js

## messages: re-extract the marked strings of the pages, messages and page scripts into
## locale/{de,zh_Hans}/LC_MESSAGES/{django,djangojs}.po and compile the .mo files the platform
## reads (needs GNU gettext: apt-get install gettext). The .mo files are committed, so demo and
## test never need gettext; tests/test_translations.py fails when a .po and its .mo disagree.
LOCALES := -l de -l zh_Hans
MESSAGES_IGNORE := --ignore=.venv --ignore=tests --ignore=bench --ignore=docs --ignore=frontend \
	--ignore=staticfiles --ignore=var --ignore=templates/static/vendor
messages: install
	$(BIN)/python manage.py makemessages $(LOCALES) -d django --no-location $(MESSAGES_IGNORE) --ignore=templates/static
	$(BIN)/python manage.py makemessages $(LOCALES) -d djangojs --no-location $(MESSAGES_IGNORE)
	$(BIN)/python manage.py compilemessages $(LOCALES) --ignore=.venv --ignore=frontend

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-* staticfiles
