"""Every field of a cached paradigm's decoding state is declared with its layout at fixed shapes (StepState.FIELDS),
so that laying it out for whole steps (at_fixed_shapes), a compiled step's inputs (tensors) and its layout key
(layout) never miss one: a field added without a declaration fails here."""

from __future__ import annotations

import pytest

from models import DecodeConfig, steps
from model_utils import FIXED_STEPS, random_prompts, tiny


@pytest.mark.parametrize("paradigm", FIXED_STEPS)
def test_every_state_field_is_declared_and_laid_out(paradigm, monkeypatch):
    seen, at_fixed_shapes = [], steps.StepState.at_fixed_shapes

    def spy(state, width, n):
        fixed = at_fixed_shapes(state, width, n)
        seen.append((state, fixed, width))
        return fixed

    monkeypatch.setattr(steps.StepState, "at_fixed_shapes", spy)
    model = tiny(paradigm, block_size=4)
    for decode in (DecodeConfig(compile="fixed"), DecodeConfig(compile="fixed", greedy=False, policy="klass")
                   if paradigm != "ar" else DecodeConfig(compile="fixed", greedy=False)):
        model.generate(random_prompts(2, 0), 10, decode)
    assert seen
    for state, fixed, width in seen:
        undeclared = set(vars(fixed)) - set(type(fixed).FIELDS)
        assert not undeclared, f"{type(fixed).__name__} fields without a layout in FIELDS: {sorted(undeclared)}"
        for name, tags in type(fixed).FIELDS.items():
            if steps.CANVAS in tags.split() and getattr(fixed, name, None) is not None:
                assert getattr(fixed, name).shape[1] == width, name
        assert set(fixed.tensors()) >= {name for name, value in vars(fixed).items() if hasattr(value, "shape")}
