"""kvlab.viz.iri_parser: importing kvlab.viz does not build rfc3987_syntax's parsers (1.2 s of CPU
in every lesson's first cell), and jsonschema's IRI format checks give the same answers as with the
real module, which the stand-in imports at the first check (both in fresh interpreters)."""
from __future__ import annotations

import importlib.machinery
import json
import subprocess
import sys

IRIS = ["https://example.org/a%20b", "no scheme", "http://例え.テスト/パス", "urn:isbn:0451450523", "http://[::1]:80/",
        "http://a b", "mailto:someone@example.org", ""]
PROBE = """
import json, sys
{setup}
import jsonschema
lark_before = "lark" in sys.modules
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
print(json.dumps({{"lark_before": lark_before, "answers": [checker.conforms(x, "iri") for x in {iris!r}],
                  "stand_in": getattr(sys.modules.get("rfc3987_syntax"), "kvlab_stand_in", False)}}))
"""


def _probe(setup: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup, iris=IRIS)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kvlab_viz_defers_the_parsers_and_iri_checks_answer_as_before():
    # installed by the set-up (JupyterLab's jupyter-events); tests/conftest.py keeps it out of pytest's own processes
    assert importlib.machinery.PathFinder.find_spec("rfc3987_syntax") is not None
    deferred, plain = _probe("import kvlab.viz"), _probe("")
    assert not deferred["lark_before"] and deferred["stand_in"] is False   # built only at the first check, then real
    assert plain["lark_before"]                                            # without kvlab.viz: built at import
    assert deferred["answers"] == plain["answers"] and plain["answers"][:2] == [True, False]
