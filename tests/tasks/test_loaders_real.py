"""The loaders on the real official annotation files in ../shared/benchmarks (skipped when absent)."""

from __future__ import annotations

import collections
import re

import pytest

from lmms_eval_tasks.loaders import load_benchmark, read_benchmark
from lmms_eval_tasks.traffic import VRU_CATEGORIES


@pytest.fixture(scope="module")
def mmau(shared_benchmarks):
    return load_benchmark("mmau", shared_benchmarks / "mm_au")


@pytest.fixture(scope="module")
def vru(shared_benchmarks):
    return load_benchmark("vru_accident", shared_benchmarks / "vru_accident")


def _well_formed(records):
    for r in records:
        k = len(r.options)
        assert 0 <= r.answer_index < k, r
        assert all(isinstance(o, str) and o.strip() for o in r.options), r
        assert r.question.strip()
    assert len({r.question_id for r in records}) == len(records)


def test_mmau_counts_and_shape(mmau):
    assert len(mmau) == 2453
    assert collections.Counter(r.source for r in mmau) == {"CAP": 1953, "DADA": 500}
    assert {len(r.options) for r in mmau} == {5}
    _well_formed(mmau)


def test_mmau_quirks(mmau):
    by_id = {r.question_id: r for r in mmau}
    cap = by_id["cap-7816"]  # first record of ArA label/test.json; answer "1" is a 0-based index as a string
    assert cap.answer_index == 1 and cap.options[1] == "the car driver is in distracted driving."
    assert cap.video == "CAP-DATA/43/43/001222/images"
    # DADA video numbers repeat across accident types: ids carry the type ('093' under type 11).
    dada = by_id["dada-11-093"]
    assert dada.answer_index == 3 and dada.video == "DADA-DATA/11/093/images"
    assert dada.options[3] == "Ego-car drives too fast and the braking distance is short"
    # every DADA answer cell was a float such as 3.0; all five indices occur
    assert {r.answer_index for r in mmau if r.source == "DADA"} == {0, 1, 2, 3, 4}


def test_vru_counts_and_shape(vru):
    assert len(vru) == 6000
    assert collections.Counter(r.category for r in vru) == {c: 1000 for c in VRU_CATEGORIES}
    assert collections.Counter(r.source for r in vru) == {"CAP_DATA": 287 * 6, "DADA_2000": 223 * 6,
                                                             "DoTA": 100 * 6, "MANUAL_DATA": 390 * 6}
    assert len({r.video for r in vru}) == 1000
    assert {len(r.options) for r in vru} == {4}
    _well_formed(vru)


def test_vru_option_strings_split_at_letter_markers(vru, shared_benchmarks):
    by_id = {r.question_id: r for r in vru}
    # 'B.Cyclist ...' with no space, and an option text containing a comma
    r = by_id["CAP_DATA/VRU_2/accident reason"]
    assert r.options[0] == "The ego-car's vision is blocked or blurred, and there is no time to brake"
    assert r.options[1] == "Cyclist does not notice the coming vehicles when crossing the street."
    assert r.options[1] == r.options[3]  # the official file repeats an option text: kept as given
    assert r.answer_index == 0
    # a stray fifth marker ('... pedestrians. B. The truck ..., B. Bus ...'): split at the ', ' joiners
    r = by_id["CAP_DATA/VRU_98/prevention method"]
    assert r.options[1].startswith("Bus drivers should maintain") and r.options[0].startswith("Trucks should")
    stray = [r.question_id for r in vru if any(re.search(r"(^|[\s,.])[A-D]\.\s", o) for o in r.options)]
    assert len(stray) == 11
    noted = read_benchmark("vru_accident", shared_benchmarks / "vru_accident").notes  # what check-data reports
    assert noted == {"a stray letter marker kept inside an option's text": stray}
    assert vru[0].answer_index == 0 and vru[0].options[0] == "sunny day"
