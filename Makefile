# kvlab: the two commands (see README.md)
#   make lab    set everything up, then open the lessons in JupyterLab
#   make test   set everything up, then run the whole test suite (what CI runs)
.PHONY: lab test setup notebooks bench clean

lab:
	@bash scripts/lab.sh

test:
	@bash scripts/test.sh

setup:
	@bash scripts/setup.sh

# Re-execute the lessons and store their outputs (after changing kvlab or a lesson).
notebooks: setup
	.venv/bin/python scripts/build_notebooks.py

clean:
	rm -rf .venv .pytest_cache .hypothesis tests/_artifacts bench/out
