"""The LMs that measure rather than being measured, in one room: the gen-PPL judge (genppl's `judge` and
`judge_precision` options: SmolLM2 by default, the sweep's own AR model as the fallback, any causal LM spec) and
the MAUVE featuriser (mauve's `features` and `features_precision`: SmolLM2's last hidden state by default, or
MiniLM). Both are planned as data (`Judge`, `Featuriser`: one per sweep, PlanError when cells name several), and
loaded by execution through the one model front door (harness.evaluate.load_model), computing in fp32 unless a
task option says otherwise (a measuring instrument is the same on every machine: harness.precision).

A judged sample is decoded to text by the generating model's tokenizer and re-encoded with the judge's own (bos +
text, cut to the judge's context; the text's tokens are the targets), so judges and generators need not share a
vocabulary and gen-PPL is per judge token. The featuriser's features are cached per text within the process.

    python -m harness.run --preset smoke --paradigm mdlm --task genppl --limit 2
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks import TASKS, NllRequest
from tasks.genppl import DEFAULT_JUDGE, DEFAULT_JUDGE_PRECISION, OWN_AR_JUDGE
from tasks.mauve_task import DEFAULT_FEATURES, DEFAULT_FEATURES_PRECISION, MINILM

from .configs import PlanError, RunCell, TrainConfig, spec_model_id
from .precision import DTYPE_PRECISIONS, INSTRUMENT_PRECISION


@dataclass(frozen=True)
class Judge:
    """The causal LM that scores gen-PPL samples (the genppl task option `judge`): the sweep's own AR model
    (`train`), or a spec opened as the AR paradigm (`spec`: SmolLM2, any pretrained LM, an AR checkpoint), computing
    in `precision` (the genppl option `judge_precision`: fp32 unless a user says otherwise)."""
    model_id: str
    name: str                          # in every gen-PPL row and label
    train: TrainConfig | None = None
    spec: str | None = None
    precision: str = INSTRUMENT_PRECISION


@dataclass(frozen=True)
class Featuriser:
    """What turns MAUVE's texts into features (the mauve task options `features`, `features_precision`): MINILM or
    a causal LM spec, computing in `precision`."""
    spec: str
    precision: str = DEFAULT_FEATURES_PRECISION


def plan_judge(preset, cells: list[RunCell], seed: int, precision: str, device: str) -> Judge | None:
    """The one judge of the cells that need one (their `judge` and `judge_precision` task options); PlanError if
    they name several. `precision` is the requested one ("auto" too): it trains the sweep's own AR judge."""
    judging = [c for c in cells if TASKS[c.task].measures_with == "judge"]
    specs = sorted({c.options.get("judge", DEFAULT_JUDGE) for c in judging})
    if not specs:
        return None
    if len(specs) > 1:
        raise PlanError(f"one sweep has one gen-PPL judge; these cells name several: {', '.join(specs)}")
    precisions = sorted({c.options.get("judge_precision", DEFAULT_JUDGE_PRECISION) for c in judging})
    if len(precisions) > 1:
        raise PlanError(f"one sweep judges in one precision; these cells name several: {', '.join(precisions)}")
    if specs[0] == OWN_AR_JUDGE:
        ar = next(c for c in preset.train_configs(("ar",), seed, precision, device))
        return Judge(ar.model_id, f"ar:{ar.model_id}", train=ar, precision=precisions[0])
    model_id = spec_model_id(specs[0])
    return Judge(model_id, model_id, spec=specs[0], precision=precisions[0])


def plan_featuriser(cells) -> Featuriser | None:
    """The one featuriser of the MAUVE cells; PlanError if they name several."""
    named = sorted({(c.options.get("features", DEFAULT_FEATURES), c.options.get("features_precision",
                                                                               DEFAULT_FEATURES_PRECISION))
                    for c in cells if TASKS[c.task].measures_with == "features"})
    if len(named) > 1:
        raise PlanError(f"one sweep has one MAUVE featuriser; these cells name several: "
                        f"{', '.join(f'{s} ({p})' for s, p in named)}")
    return Featuriser(*named[0]) if named else None


class ARJudge:
    """An AR model as judge, named `name` in rows and labels, with the precision it computes in (`precision`:
    rows name it): score_texts(texts) -> [(nll in nats, tokens scored)]."""

    def __init__(self, loaded, name: str):   # a harness.evaluate.LoadedModel
        if loaded.model.paradigm != "ar":
            raise PlanError(f"the gen-PPL judge must be an AR model, got {loaded.model.paradigm} ({loaded.model_id})")
        self.loaded = loaded
        self.name = name
        self.precision = DTYPE_PRECISIONS[loaded.dtype]

    def score_texts(self, texts: list[str]) -> list[tuple[float, int]]:
        from .evaluate import execute_nll   # lazy: planning imports this module, never the evaluation code

        tok, L = self.loaded.tokenizer, self.loaded.length
        requests = [NllRequest([tok.bos_id] + tok.encode(t)[:L - 1], 1) for t in texts]
        return [(o.nll, o.n_tokens) for o in execute_nll(self.loaded, requests, seed=0)]


_FEATURISERS: dict[tuple[str, str, str], object] = {}   # per process: (spec, precision, device) -> featuriser


def load_featuriser(featuriser: Featuriser, device: torch.device | str) -> object:
    """The featuriser, loaded once per process: MiniLM (always fp32, on the CPU), or the causal LM opened as AR
    through load_model in the featuriser's precision (tasks.mauve_task.LMFeatures: its last hidden state)."""
    from tasks.mauve_task import LMFeatures, load_minilm

    from .evaluate import load_model   # lazy: planning imports this module, never the evaluation code

    key = (featuriser.spec, featuriser.precision, str(device))
    if key not in _FEATURISERS:
        if featuriser.spec == MINILM:
            _FEATURISERS[key] = load_minilm()
        else:
            loaded = load_model(featuriser.spec, torch.device(device), paradigm="ar", precision=featuriser.precision)
            _FEATURISERS[key] = LMFeatures(loaded.model, loaded.tokenizer, featuriser.spec)
    return _FEATURISERS[key]


def equip(task, featuriser: Featuriser | None, device: torch.device | str):
    """`task` with the instrument it measures with attached (the MAUVE featuriser); other tasks as they are."""
    if TASKS[task.name].measures_with == "features" and featuriser is not None:
        task.use_featuriser(load_featuriser(featuriser, device))
    return task
