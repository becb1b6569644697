"""The support matrix and SoC-name rules (docs/hardware.md), and the README's copy of the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_kv.dispatch import support

ALL = {"KVCacheOperation": True, "PagedCacheLoadOperation": True, "ReshapeAndCacheOperation": True,
       "BlockCopyOperation": True}
RESHAPE_ONLY = {"KVCacheOperation": False, "PagedCacheLoadOperation": False, "ReshapeAndCacheOperation": True,
                "BlockCopyOperation": False}
RESHAPE_AND_BLOCK_COPY = {**RESHAPE_ONLY, "BlockCopyOperation": True}  # the Atlas inference series (310P)
NONE = {"KVCacheOperation": False, "PagedCacheLoadOperation": False, "ReshapeAndCacheOperation": False,
        "BlockCopyOperation": False}
LAYOUTS = {"atlas-350": ["nd"], "atlas-a3": ["nd", "nz"], "atlas-a2": ["nd", "nz"], "atlas-training": ["nz"],
           "atlas-inference": ["nz"], "atlas-200i-500-a2": ["nz"], None: []}

# (SoC name as the runtime or a user may spell it, product line id or None)
NAMES = [
    # Atlas A2: "Ascend910B" followed by more characters
    *[(n, "atlas-a2") for n in ["Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4",
                                "Ascend910B4-1"]],
    # Atlas A3
    *[(f"Ascend910_93{s}", "atlas-a3") for s in ["91", "92", "81", "82", "72", "62", "63"]],
    # Atlas 350
    ("Ascend950PR_9579", "atlas-350"), ("Ascend950DT_9582", "atlas-350"), ("Ascend910_9579", "atlas-350"),
    # first-generation Ascend 910, including exactly "Ascend910B"
    *[(n, "atlas-training") for n in ["Ascend910A", "Ascend910ProA", "Ascend910ProB", "Ascend910PremiumA",
                                      "Ascend910B"]],
    # Ascend 310P, including virtualised names
    *[(f"Ascend310P{i}", "atlas-inference") for i in range(1, 8)],
    ("ascend310p3vir02", "atlas-inference"),
    # Ascend 310B
    *[(f"Ascend310B{i}", "atlas-200i-500-a2") for i in range(1, 5)],
    # unknown: never guessed
    ("Ascend910", None), ("Ascend910_9", None), ("Ascend310", None), ("Ascend", None), ("", None),
    ("910B3", None), ("Ascend 910B3", None), ("cpu", None), ("Atlas A2", None),
]


@pytest.mark.parametrize(("soc", "line"), NAMES)
def test_product_line_of_each_soc_name(soc: str, line: str | None) -> None:
    found = support.product_line(soc)
    assert (found.id if found else None) == line
    expected_ops = (ALL if line in ("atlas-a2", "atlas-a3") else NONE if line is None
                    else RESHAPE_AND_BLOCK_COPY if line == "atlas-inference" else RESHAPE_ONLY)
    assert support.soc_answer(soc) == {"soc": soc, "product_line": line, "ops": expected_ops,
                                       "layouts": {"ReshapeAndCacheOperation": LAYOUTS[line]},
                                       "kernels_run": ALL if line in ("atlas-a2", "atlas-a3") else NONE}
    for op in support.OPERATIONS:
        assert support.is_supported(op, soc) is expected_ops[op]
        assert (found is not None and found.kernels_run(op)) is (line in ("atlas-a2", "atlas-a3"))


@pytest.mark.parametrize(("soc", "line"), [(s, line) for s, line in NAMES if s])
@pytest.mark.parametrize("spell", [str.lower, str.upper, lambda s: f"  {s}\t", lambda s: f"\n{s.swapcase()} "])
def test_odd_spellings_match_like_the_canonical_name(soc: str, line: str | None, spell) -> None:
    odd = spell(soc)
    found = support.product_line(odd)
    assert (found.id if found else None) == line
    assert support.soc_answer(odd)["soc"] == odd  # echoed as given


@given(st.text(alphabet="0123456789ABCDEFGHPRTabcdefghprt_-", max_size=8))
def test_any_suffix_after_ascend910b_is_a2_and_exactly_ascend910b_is_first_generation(suffix: str) -> None:
    line = support.product_line("Ascend910B" + suffix)
    assert line is not None and line.id == ("atlas-a2" if suffix else "atlas-training")


def test_matrix_is_huaweis_table() -> None:
    assert support.matrix() == {
        "atlas-350": RESHAPE_ONLY,
        "atlas-a3": ALL,
        "atlas-a2": ALL,
        "atlas-training": RESHAPE_ONLY,
        "atlas-inference": RESHAPE_AND_BLOCK_COPY,
        "atlas-200i-500-a2": RESHAPE_ONLY,
    }


def test_every_rule_names_a_known_line_and_prefix_rules_never_overlap() -> None:
    ids = {line.id for line in support.PRODUCT_LINES}
    assert {p.line for p in support.SOC_PATTERNS} == ids
    prefixes = [p.text for p in support.SOC_PATTERNS if not p.exact]
    for a in prefixes:
        for b in prefixes:
            assert a == b or not b.startswith(a), (a, b)
    assert all(p.text == p.text.strip().lower() for p in support.SOC_PATTERNS)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="op must be one of KVCacheOperation, PagedCacheLoadOperation, "
                                         "ReshapeAndCacheOperation, BlockCopyOperation, got 'kv'"):
        support.is_supported("kv", "Ascend910B3")
    with pytest.raises(TypeError, match="soc must be a str, got int"):
        support.product_line(910)  # type: ignore[arg-type]


def test_markdown_table_has_a_row_per_line_from_the_data() -> None:
    rows = support.markdown_table().splitlines()
    assert rows[0] == ("| Product line | id | SoC names | KVCacheOperation | PagedCacheLoadOperation | "
                       "ReshapeAndCacheOperation | BlockCopyOperation | ascend_kv's kernels |")
    assert len(rows) == 2 + len(support.PRODUCT_LINES)
    for row, line in zip(rows[2:], support.PRODUCT_LINES):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:2] == [line.name, f"`{line.id}`"]
        assert cells[3:5] == ["yes" if line.supports(op) else "no" for op in support.OPERATIONS[:2]]
        assert cells[5].startswith("yes (") and all(layout.upper() in cells[5] for layout in line.layouts)
        assert cells[6] == {"atlas-a2": "yes (ND, NZ)", "atlas-a3": "yes (ND, NZ)",
                            "atlas-inference": "yes (float16 only)"}.get(line.id, "no")
        assert cells[7] == ("yes" if line.id in ("atlas-a2", "atlas-a3") else "no (the fallback runs on the NPU)")


def test_readme_contains_exactly_the_generated_table() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert support.markdown_table() in readme, (
        "README.md's support table differs from ascend_kv.dispatch.support.markdown_table(); paste its output:\n"
        + support.markdown_table()
    )
