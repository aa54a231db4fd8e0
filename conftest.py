"""Collection rules for the doctests of kvlab (pyproject's testpaths include kvlab/).

kvlab/serve needs the ``serve`` extra (FastAPI, uvicorn, prometheus_client); where it is missing
(the GPU machine has only the core packages) its doctests are skipped, not failed at import.
"""
import importlib.util

collect_ignore_glob = [] if all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn", "prometheus_client")) \
    else ["kvlab/serve/*.py"]
