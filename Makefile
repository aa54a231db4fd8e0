# kvlab: the two commands (see README.md)
#   make lab    set everything up, then open the lessons in JupyterLab
#   make test   set everything up, then run the whole test suite (what CI runs)
.PHONY: lab test setup notebooks bench clean screenshots site mutants

lab:
	@bash scripts/lab.sh

test:
	@bash scripts/test.sh

setup:
	@bash scripts/setup.sh

# Re-execute the lessons and store their outputs (after changing kvlab or a lesson).
notebooks: setup
	.venv/bin/python scripts/build_notebooks.py

# Every lesson in JupyterLab + headless Chromium, normal (1500x1000) and classroom mode (1280x720):
# page PNGs and overflow.json in tests/_artifacts/screenshots/. Some lessons: make screenshots LESSONS="04 07"
screenshots:
	.venv/bin/python scripts/screenshots.py $(LESSONS)

# The executed lessons as a static web site in site/ (offline; open site/index.html). Runs the
# lessons with KVLAB_STATIC=frames (cached in build/site-cache/). Some lessons: make site LESSONS="04 07"
site:
	.venv/bin/python scripts/build_site.py $(LESSONS)

# Mutation testing of the exercise checkers (scripts/mutants.py): mutants of every reference solution,
# each run against its checker; figures per lesson, the survivors. Some lessons: make mutants LESSONS="03 04"
mutants:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 .venv/bin/python scripts/mutants.py $(LESSONS)

clean:
	rm -rf .venv .pytest_cache .hypothesis tests/_artifacts bench/out site build/site-cache build/lesson-runs
