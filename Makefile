# Two commands matter: `make dev` (run everything locally) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test image-test venv clean messages

$(STAMP): requirements.lock requirements-test.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-test.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

## Run a local store with a demo user (data under ./.dev-data), printing URL and token.
## Extra options go in ARGS, e.g. make dev ARGS="--port 9000 --connector-port 9001".
ARGS ?=
dev: $(STAMP)
	$(BIN)/brain-store dev --data .dev-data $(ARGS)

## Run the whole test suite. Bytecode caches are written even where the environment says not to:
## pytest rewrites every test module's assertions, ~10 s of CPU per worker when it cannot keep them.
## Three workers on two cores: many tests wait on the servers they start, and a third worker
## fills those waits (on two cores: 12m09s with two workers, 11m05s with three).
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n 3 --dist loadgroup --durations=20

## Build the image and run it for real (root; apt-get install docker.io debootstrap). Not part of
## `make test`: the first run takes minutes (a Debian base image is made with debootstrap).
image-test: $(STAMP)
	BRAIN_STORE_IMAGE_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider -n 0 tests/image

## Extract the pages' messages and update every catalog (connector/i18n/locale/*/LC_MESSAGES/messages.po).
## New messages arrive untranslated; translate them (tests/connector/webapp/test_i18n_catalogs.py checks).
LOCALE_DIR := connector/i18n/locale
messages: $(STAMP)
	$(BIN)/pybabel extract -F babel.cfg -k N_ -k Text --no-location --sort-by-file --omit-header \
		--add-comments=Translators: -o $(LOCALE_DIR)/messages.pot .
	$(BIN)/pybabel update -i $(LOCALE_DIR)/messages.pot -d $(LOCALE_DIR) --no-fuzzy-matching --ignore-obsolete

clean:
	rm -rf $(VENV) .dev-data .pytest_cache
