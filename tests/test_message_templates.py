"""Rule message templates: fact values filled in, and a fact the rule fired without left out of the sentence."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from expert.diagnosis.build import render_message


def test_known_values_are_formatted() -> None:
    assert render_message("GPU {gpu_util:.0%} busy (mean kernel {mean_kernel_us:.1f} µs).",
                          {"gpu_util": 0.45, "mean_kernel_us": 3.25}) == "GPU 45% busy (mean kernel 3.2 µs)."


@pytest.mark.parametrize(("template", "expected"), [
    # the parenthesis around an unknown value goes, with the space before it
    ("kernels one by one (mean kernel {mean_kernel_us:.1f} µs): launch-overhead-bound.",
     "kernels one by one: launch-overhead-bound."),
    # two unknowns in one parenthesis: it goes once
    ("the job's FLOP rate (MFU {mfu:.0%} of the {dtype} peak) is above", "the job's FLOP rate is above"),
    # only the innermost parenthesis around the unknown goes
    ("a (b {x} c) d (e {gpu_util:.0%}) f", "a d (e 45%) f"),
    ("a (b (c {x}) d) e", "a (b d) e"),
    # outside a parenthesis it says so
    ("launched by {x}: fuse them", "launched by unknown: fuse them"),
])
def test_an_unknown_value_drops_its_parenthesis(template: str, expected: str) -> None:
    assert render_message(template, {"gpu_util": 0.45}) == expected


def test_a_known_value_with_parentheses_is_kept_whole() -> None:
    facts = {"idle_host_ops": "aten::copy_ (pageable)"}
    assert render_message("busy (mostly in {idle_host_ops})", facts) == "busy (mostly in aten::copy_ (pageable))"
    # beside an unknown in the same parenthesis, the clause cannot be cut cleanly: the unknown reads 'unknown'
    assert render_message("busy (in {idle_host_ops}, {x})", facts) == "busy (in aten::copy_ (pageable), unknown)"


@given(st.text(alphabet="ab (){}x", max_size=30))
def test_no_placeholder_marker_reaches_the_text(template: str) -> None:
    assert "\x00" not in render_message(template, {"a": "v\x00"})
