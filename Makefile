# The two commands of the README's quick start, and a few helpers.
# Each installs what is missing (infra/setup.sh) and starts the local stack first.
.PHONY: setup up down demo test lint

setup:
	bash infra/setup.sh

up: setup
	.venv/bin/gridledger dev up

down:
	.venv/bin/gridledger dev down

demo: up
	.venv/bin/gridledger demo

# pytest exits 5 when it collected nothing: a broken setup, never a pass. The 40 slowest
# tests are listed at the end, so that each CI log says where the suite's time goes.
test: up
	.venv/bin/python -m pytest -q --durations=40; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

lint: setup
	bash infra/lint.sh
