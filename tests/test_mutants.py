"""Mutation testing of the checkers (scripts/mutants.py): a fast sample of mutants a lesson must be
rejected by its checker, and the equivalents file must name only mutants that exist.

The whole run is ``make mutants`` (figures per lesson); here 3 mutants a lesson, in seconds.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("kvlab_mutants", ROOT / "scripts" / "mutants.py")
mutants = importlib.util.module_from_spec(_spec)
sys.modules["kvlab_mutants"] = mutants
_spec.loader.exec_module(mutants)  # type: ignore[union-attr]

LESSONS = ["00", "01", "02", "03", "04", "05", "12"]


def test_equivalents_name_existing_mutants_with_a_reason():
    ids = {s.mutant_id for nn in mutants.all_lessons() for s in mutants.lesson_sites(nn)[1]}
    listed = mutants.load_equivalent()
    assert not [m for m in listed if m not in ids], "equivalents that are no mutant (renamed? fixed?)"
    assert all(len(reason) > 10 for reason in listed.values()), "every equivalent needs a one-line reason"


def test_mutator_makes_every_kind_of_mutant():
    ops = {s.op.rstrip("+-1").split("-")[0] for nn in LESSONS for s in mutants.lesson_sites(nn)[1]}
    assert {"cmp", "const", "index", "binop", "round", "copy", "args", "boolop", "drop", "flow", "return"} <= ops


ONLY = {"01": "attend_with_cache"}  # count_flops' checker runs the model (seconds): make mutants covers it


@pytest.mark.parametrize("nn", LESSONS)
def test_sampled_mutants_are_killed(nn):
    outs = mutants.run_lesson(nn, sample=3, only=ONLY.get(nn), timeout=20)
    assert len(outs) >= 3
    bad = [(o.mutant_id, o.status, o.change) for o in outs if o.status not in ("killed", "equivalent", "timeout")]
    assert not bad, f"mutants the checker accepts (or crashes on): {bad}"
