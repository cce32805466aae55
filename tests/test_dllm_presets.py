"""Each `*-gsm8k` dLLM preset's cell runs on its family's fixture (../shared/fixtures/dllm, with its family's chat
template, substituted for the hub id): the preset's own sampler, chat template and stop rule, 2 questions at a short
length; a model without a likelihood (Fast-dLLM v2) runs the generation metric and says the answer likelihood is
not available.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from harness.launchers import execute
from harness.presets import PRESETS, TaskSpec
from harness.sweep import plan_sweep

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "dllm"
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
# preset -> (fixture, chat template, the length the test decodes: a multiple of the sampler's blocks)
CASES = {"llada-gsm8k": ("llada_mha", "llada", 32), "dream-gsm8k": ("dream_gqa", "dream", 16),
         "sdar-gsm8k": ("sdar_b4", "sdar", 16), "fastdllm-gsm8k": ("fastdllm_v2_bd8", "fastdllm_v2", 16)}


def substituted(name: str, root: Path):
    """The preset with its fixture (under the hub checkpoint's name, its family's template beside it) for the hub id,
    2 embedded questions, no warm-up, a short length; everything else (sampler, chat, precision) the preset's."""
    case, template, length = CASES[name]
    preset = PRESETS[name]
    (hub_id, options), = preset.external
    folder = root / hub_id.split("/")[-1]
    shutil.copytree(FIXTURES / case, folder)
    shutil.copy(TEMPLATES / f"{template}.jinja", folder / "chat_template.jinja")
    spec, = preset.tasks
    task_options = {k: v for k, v in spec.options.items() if k != "source"} | {"max_new_tokens": length}
    return dataclasses.replace(preset, external=((str(folder), options),), warmup=0, precision="fp32",
                               tasks=(dataclasses.replace(spec, limit=2, options=task_options),))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_dllm_preset_cell_runs_on_its_fixture(name, tmp_path):
    preset = substituted(name, tmp_path)
    plan = plan_sweep(preset, device="cpu")
    cell, = plan.cells
    family = PRESETS[name].tasks[0].decode["sampler"].partition("(")[0]
    assert cell.options["chat"] is True and cell.decode.sampler.partition("(")[0] == family
    store = execute(plan, str(tmp_path / "out"), "cpu", progress=False)
    rows = {r["metric"]: r for r in store.runs()}
    assert rows["exact_match"]["value"] is not None and rows["exact_match"]["nfe_mean"] > 0
    assert rows["exact_match"]["task_options"]["chat"] is True
    nll = rows["answer_nll_per_token"]
    if name == "fastdllm-gsm8k":   # no likelihood: the row says so, with no value
        assert nll["value"] is None and "has no likelihood" in nll["not_available"]
    else:
        assert nll["value"] > 0 and "not_available" not in nll
    examples = [json.loads(line) for f in (tmp_path / "out" / preset.name / "examples").glob("*.jsonl")
                for line in f.read_text().splitlines()]
    assert len(examples) == 2
