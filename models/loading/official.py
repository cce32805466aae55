"""The SetDLM paper's published checkpoints (kuleshov-group/*) loaded into this project's paradigms.

    from models.loading.official import load_official
    from models.loading.paper import resolve_paper_key
    model, tok = load_official(resolve_paper_key("owt:bd3lm-s4"))      # or any save_pretrained folder
    gen = model.generate([[tok.bos_id]], 64, DecodeConfig(sampler="official"))[0]

A published checkpoint is a transformers `save_pretrained` folder written by the official code
(docs/published-checkpoints.md §2): `config.json` (a DenoiserConfig), `pytorch_model.bin`
(or shards with `pytorch_model.bin.index.json`; `model.safetensors` is read when present), tokenizer
files and flattened copies of the official code, which are ignored. Nothing is imported from the folder
and `trust_remote_code` is never used; the pickled weights are read with
`torch.load(weights_only=True)` only and must be a flat dict of tensors.

How the folder maps onto this project:

* paradigm: `architectures[0]` (AR, MDLM, BD3LM, SetDLM; the old name AnyOrderBD3LM = SetDLM). SetDLM is
  saved with `model_type: bd3lm`, so model_type alone is not trusted; `noise_config._target_`
  (StaggeredNoise / EaseOutPowerNoise = SetDLM) must not contradict it.
* backbone: the class name of `backbone_config._target_`: DIT -> kind "dit", DITLegacy -> "dit_legacy"
  (models/backbones/dit.py), AutoModelFromPreTrained (Qwen3) -> kind "llama" with q/k norms. The Qwen3
  architecture is not in the checkpoint: it is read from the base model's config.json (the folder named
  by `backbone_config.pretrained_model_name_or_path` relative to the checkpoint or absolute, or the
  Hugging Face cache, offline) with the overrides of `backbone_config` applied, or else, for the known
  Qwen3 base ids, inferred from the tensor shapes plus the documented defaults (rope_theta 1e6,
  rms_norm_eps 1e-6; tied head when lm_head equals the embedding).
* sizes: L = `length`; BD3LM S = `block_size`; SetDLM S = `noise_config.desired_block_size` (else the
  `smaxN` / `dN` / `tgtN` in the folder name, as the official eval loader infers it) and S_max =
  `noise_config.max_block_size` when smaller than L, else min(2S, L) (what the official eval loader
  rebuilds). Token ids come from config.json (the official loader's truth), the tokenizer roles from
  the ids, falling back to tokenizer_config.json / special_tokens_map.json for null ids.
* ignored: `static_attention_mask` (rebuilt from L), `rotary_emb.inv_freq` (recomputed), `keep_clean_bos`
  (training only; it also sets `Tokenizer.add_bos`), `attn_backend`, `tie_word_embeddings` of the DiT
  (never used by the official DiT), `setdlm_*` flags (decoding: DecodeConfig(sampler="official",
  commit_order="first_hitting") is the GSM8K harness's setdlm_fht_cache_order).

The paper's 32 checkpoints by key, and their download, are models/loading/paper.py's.
The tests write this layout themselves (tests/official_layout.py: `save_official`, and `trace_calls` for
call-by-call comparison with the official sampler).

    python -m models.loading.paper owt:bd3lm-s4 --prompt-ids 50256 --new-tokens 16   # decode one (paper.py)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import jsonio
from ..backbones import BackboneSpec
from ..backbones.dit import DiTArch, DiTLegacyArch
from ..backbones.llama import LlamaArch
from ..chat import chat_template
from .checkpoint import assemble
from .files import CheckpointError, check_tensors, shard_files
from ..errors import UserError, unknown
from ..text import native_path
from ..fields import check_types
from .tokenizers import Tokenizer

ARCHITECTURES = {"AR": "ar", "MDLM": "mdlm", "BD3LM": "bd3lm", "SetDLM": "setdlm", "AnyOrderBD3LM": "setdlm"}
PARADIGM_ARCHITECTURE = {"ar": "AR", "mdlm": "MDLM", "bd3lm": "BD3LM", "setdlm": "SetDLM"}
BACKBONE_CLASSES = {"DIT": "dit", "DITLegacy": "dit_legacy", "AutoModelFromPreTrained": "qwen3"}
BACKBONE_TARGETS = {"dit": "backbone_dit.DIT", "dit_legacy": "backbone_dit_legacy.DITLegacy",
                    "qwen3": "backbone_automodel.AutoModelFromPreTrained"}
STAGGERED_NOISES = ("StaggeredNoise", "EaseOutPowerNoise")
LINEAR_NOISES = ("LinearNoise",)
AUTOMODEL_KEYS = frozenset({"_target_", "automodel_cls", "pretrained_model_name_or_path", "revision",
                            "trust_remote_code", "num_layers", "keep_top_layers", "reinit_model",
                            "attn_implementation", "use_causal_mask"})
DIT_KEYS = frozenset({"_target_", "length", "causal_attention", "adaln", "hidden_size", "cond_dim", "n_heads",
                      "num_layers", "dropout", "tie_word_embeddings", "attn_backend", "vocab_size", "block_size",
                      "pretrained_model_name_or_path", "norm_type"})
# Qwen3 base models the paper fine-tunes (GSM8K: 1.7B) or re-initialises (CNN/DM: 0.6B config with overrides);
# their documented defaults when no base config.json can be found (published-checkpoints.md §1.2)
QWEN3_BASES = ("Qwen/Qwen3-0.6B-Base", "Qwen/Qwen3-1.7B-Base", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B")
QWEN3_DEFAULTS = {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6}
BASE_DIR = "base_model"       # where a Qwen3 base config lies next to config.json (loads look here first)
DROPPED_KEYS = ("static_attention_mask", "backbone.rotary_emb.inv_freq")

def _one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


# -- detection and config ------------------------------------------------------------------------------
# the type of every config.json field this loader reads (models.fields.check_types), checked before any is used
_ROLE_IDS = {f"{role}_token_id": int for role in ("bos", "eos", "pad", "mask", "sep")}
CONFIG_TYPES = {"architectures": [str], "model_type": str, "length": int, "block_size": int, "vocab_size": int,
                "keep_clean_bos": bool, "tokenization_config": _ROLE_IDS, **_ROLE_IDS,
                "noise_config": {"_target_": str, "desired_block_size": int, "block_size": int, "max_block_size": int},
                "backbone_config": {"_target_": str, "num_layers": int, "hidden_size": int, "n_heads": int,
                                    "cond_dim": int, "dropout": float, "reinit_model": bool, "norm_type": str,
                                    "pretrained_model_name_or_path": str}}


def _read_json(path: Path) -> dict:
    try:
        value = jsonio.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({_one_line(e)})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value


def is_official_checkpoint(directory: str | Path) -> bool:
    """True for a folder whose config.json is an official DenoiserConfig (a `backbone_config` with a
    `_target_`, and an AR/MDLM/BD3LM/SetDLM architecture or model_type); never raises."""
    path = Path(directory) / "config.json"
    try:
        cfg = jsonio.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not isinstance(cfg, dict) or "schema_version" in cfg:
        return False
    backbone = cfg.get("backbone_config")
    if not isinstance(backbone, dict) or not isinstance(backbone.get("_target_"), str):
        return False
    arch = cfg.get("architectures")
    named = isinstance(arch, list) and arch and isinstance(arch[0], str) and arch[0] in ARCHITECTURES
    return bool(named or cfg.get("model_type") in ("ar", "mdlm", "bd3lm"))


def _target_name(target: object) -> str:
    return target.rsplit(".", 1)[-1] if isinstance(target, str) else ""


def official_paradigm(cfg: dict, where: str = "config.json") -> str:
    """Our paradigm name for an official config: architectures[0], cross-checked with the noise schedule."""
    arch = cfg.get("architectures")
    noise = _target_name((cfg.get("noise_config") or {}).get("_target_"))
    if isinstance(arch, list) and arch:
        if arch[0] not in ARCHITECTURES:
            raise CheckpointError(f"{where}: {unknown('architectures[0]', arch[0], ARCHITECTURES)}")
        paradigm = ARCHITECTURES[arch[0]]
    else:   # no architectures: model_type, with SetDLM told apart by its schedule
        model_type = cfg.get("model_type")
        if model_type not in ("ar", "mdlm", "bd3lm"):
            raise CheckpointError(f"{where}: no architectures and model_type {model_type!r} is not ar, mdlm or bd3lm")
        paradigm = "setdlm" if model_type == "bd3lm" and noise in STAGGERED_NOISES else model_type
    if paradigm == "setdlm" and noise in LINEAR_NOISES or paradigm in ("mdlm", "bd3lm") and noise in STAGGERED_NOISES:
        raise CheckpointError(f"{where}: architectures says {PARADIGM_ARCHITECTURE[paradigm]} but noise_config is "
                              f"{noise}")
    return paradigm


def backbone_kind(cfg: dict, where: str = "config.json") -> str:
    """'dit', 'dit_legacy' or 'qwen3' from backbone_config._target_ (flattened or not)."""
    bc = cfg.get("backbone_config")
    if not isinstance(bc, dict):
        raise CheckpointError(f"{where}: no backbone_config object")
    target = bc.get("_target_")
    name = _target_name(target)
    if name not in BACKBONE_CLASSES:
        raise CheckpointError(f"{where}: {unknown('backbone_config._target_', target, BACKBONE_TARGETS.values())}")
    return BACKBONE_CLASSES[name]


def _int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{where}: {what} must be an integer, got {value!r}")
    return value


def _set_sizes(cfg: dict, directory: Path, L: int, where: str) -> tuple[int, int]:
    """SetDLM (S, S_max) as the official eval loader rebuilds its StaggeredNoise."""
    noise = cfg.get("noise_config") or {}
    S = noise.get("desired_block_size")
    if S is None:
        name = directory.resolve().name.lower()
        for pattern, scale in ((r"(?:^|[^a-z0-9])d(\d+)(?:$|[^a-z0-9])", 1), (r"(?:^|[^a-z0-9])tgt(\d+)(?:$|[^a-z0-9])", 1),
                               (r"(?:^|[^a-z0-9])smax(\d+)(?:$|[^a-z0-9])", 2)):
            m = re.search(pattern, name)
            if m:
                S = int(m.group(1)) // scale
                break
    if S is None:
        raise CheckpointError(f"{where}: SetDLM needs noise_config.desired_block_size (or smaxN / dN in the folder "
                              f"name) to know its set size")
    S = _int(S, "noise_config.desired_block_size", where)
    block = noise.get("block_size", cfg.get("block_size", L))
    given = noise.get("max_block_size")
    S_max = given if isinstance(given, int) and given < block else min(2 * S, L)
    if not 1 <= S <= S_max <= L:
        raise CheckpointError(f"{where}: SetDLM sizes S={S}, S_max={S_max} do not fit L={L}")
    return S, S_max


# -- weights -----------------------------------------------------------------------------------------------
def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    try:
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:   # an unpickling error, a truncated or foreign file: one message
        if type(e).__name__ == "UnpicklingError" or "weights_only" in str(e):   # (torch's own text advises the
            raise CheckpointError(f"{path}: refused, it holds Python objects beyond tensors (a pickle that could "
                                  f"run code when loaded); it must never be loaded with torch.load's unpickling allowed"
                                  ) from None                                   # unsafe way: not repeated here)
        raise CheckpointError(f"{path}: refused, not a plain tensor state dict readable with "
                              f"torch.load(weights_only=True) ({_one_line(e)})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: refused, holds a {type(obj).__name__}, not a state dict")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path}: refused, entry {bad[0]!r} is not a tensor (a state dict holds tensors only)")
    return check_tensors({k: v for k, v in obj.items() if k not in DROPPED_KEYS}, path)


def read_official_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """The checkpoint's state dict: model.safetensors (or its index) when present, else pytorch_model.bin
    (or its shards), read with torch.load(weights_only=True)."""
    directory = Path(directory)
    if (directory / "model.safetensors").is_file() or (directory / "model.safetensors.index.json").is_file():
        from .hf_format import read_safetensors

        return read_safetensors(directory)
    index = directory / "pytorch_model.bin.index.json"
    if index.is_file():
        tensors: dict[str, torch.Tensor] = {}
        for shard in shard_files(directory, index):
            tensors.update(_load_bin(shard))
        return tensors
    if (directory / "pytorch_model.bin").is_file():
        return _load_bin(directory / "pytorch_model.bin")
    raise CheckpointError(f"{directory}: no pytorch_model.bin, pytorch_model.bin.index.json or model.safetensors")


# -- backbones -----------------------------------------------------------------------------------------
def _dit_arch(bc: dict, kind: str, where: str) -> DiTArch:
    extra = sorted(set(bc) - DIT_KEYS)
    if extra:
        raise CheckpointError(f"{where}: {unknown('DiT backbone_config key', extra, sorted(DIT_KEYS))}")
    if bc.get("norm_type") not in (None, "layernorm"):
        raise CheckpointError(f"{where}: DiT norm_type {bc['norm_type']!r} is not supported (layernorm only)")
    try:
        arch = (DiTLegacyArch if kind == "dit_legacy" else DiTArch)(
            n_layers=_int(bc.get("num_layers"), "backbone_config.num_layers", where),
            d_model=_int(bc.get("hidden_size"), "backbone_config.hidden_size", where),
            n_heads=_int(bc.get("n_heads"), "backbone_config.n_heads", where),
            cond_dim=_int(bc.get("cond_dim", 128), "backbone_config.cond_dim", where),
            adaln=bool(bc.get("adaln", False)), causal=bool(bc.get("causal_attention", False)),
            dropout=float(bc.get("dropout", 0.0) or 0.0))
    except (TypeError, ValueError, UserError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{where}: {e}") from None
    return arch


def _dit_state(tensors: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    state = {}
    for key, value in tensors.items():
        if key in DROPPED_KEYS:
            continue
        if not key.startswith("backbone."):
            raise CheckpointError(f"{where}: unexpected tensor {key!r} (a DiT checkpoint holds backbone.* tensors)")
        name = key[len("backbone."):]
        state["embed.weight" if name == "vocab_embed.embedding" else name] = value
    return state


def _base_config(bc: dict, directory: Path, where: str) -> dict | None:
    """The Qwen3 base model's config.json: a folder relative to the checkpoint (or absolute), ./base_model,
    or the Hugging Face cache (no network); None if none is found."""
    name = bc.get("pretrained_model_name_or_path")
    candidates = []
    if isinstance(name, str) and name:
        candidates += [directory / name, Path(name).expanduser()]
    candidates.append(directory / BASE_DIR)
    for folder in candidates:
        if (folder / "config.json").is_file():
            return _read_json(folder / "config.json")
    if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json", revision=bc.get("revision"))
            if isinstance(cached, str) and Path(cached).is_file():
                return _read_json(Path(cached))
        except Exception:   # no hub client, a malformed cache: fall back to inference
            pass
    return None


def _qwen3_tensors(tensors: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in tensors.items():
        if key in DROPPED_KEYS:
            continue
        if key.startswith("backbone.model.model."):
            out[key[len("backbone.model.model."):]] = value
        elif key == "backbone.model.lm_head.weight":
            out["lm_head.weight"] = value
        else:
            raise CheckpointError(f"{where}: unexpected tensor {key!r} (a Qwen3 checkpoint holds backbone.model.*)")
    return out


def _infer_qwen3_config(t: dict[str, torch.Tensor], base: object, where: str) -> dict:
    if base not in QWEN3_BASES:
        raise CheckpointError(f"{where}: the Qwen3 base config {base!r} is needed (its rope_theta and norms are not "
                              f"in the weights): put its config.json in {BASE_DIR}/ next to config.json")
    try:
        D = t["embed_tokens.weight"].shape[1]
        hd = t["layers.0.self_attn.q_norm.weight"].shape[0]
        return {"model_type": "qwen3", "hidden_size": D, "num_hidden_layers": 1 + max(
                    int(k.split(".")[1]) for k in t if k.startswith("layers.")),
                "num_attention_heads": t["layers.0.self_attn.q_proj.weight"].shape[0] // hd,
                "num_key_value_heads": t["layers.0.self_attn.k_proj.weight"].shape[0] // hd, "head_dim": hd,
                "intermediate_size": t["layers.0.mlp.gate_proj.weight"].shape[0],
                "vocab_size": t["embed_tokens.weight"].shape[0], "hidden_act": "silu",
                "tie_word_embeddings": "lm_head.weight" not in t or torch.equal(t["lm_head.weight"], t["embed_tokens.weight"]),
                **QWEN3_DEFAULTS}
    except KeyError as e:
        raise CheckpointError(f"{where}: missing tensor {e.args[0]!r} to infer the Qwen3 shapes") from None


def _qwen3_arch(bc: dict, t: dict[str, torch.Tensor], directory: Path, L: int, where: str) -> LlamaArch:
    from .hf_format import arch_from_hf_config

    base = _base_config(bc, directory, where)
    cfg = dict(base) if base is not None else _infer_qwen3_config(t, bc.get("pretrained_model_name_or_path"), where)
    cfg.update({k: v for k, v in bc.items() if k not in AUTOMODEL_KEYS})   # Qwen3Config overrides (CNN/DM)
    n = bc.get("num_layers", -1)
    if isinstance(n, int) and n > 0:
        cfg["num_hidden_layers"] = min(n, int(cfg.get("num_hidden_layers", n))) if not bc.get("reinit_model") else n
    arch, _, _, window = arch_from_hf_config(cfg, f"{where} (Qwen3 base config)")
    if window is not None and window < L:
        raise CheckpointError(f"{where}: the base config's sliding window {window} < L={L} is not supported")
    return arch


def _qwen3_state(t: dict[str, torch.Tensor], arch: LlamaArch, rows: int, where: str) -> dict[str, torch.Tensor]:
    from .llama_layout import backbone_state, hf_shapes

    expected = set(hf_shapes(arch, rows)) | {"lm_head.weight"}   # the official Qwen3 always saves its head
    unexpected = sorted(set(t) - expected)
    if unexpected:
        raise CheckpointError(f"{where}: unexpected tensor backbone.model.model.{unexpected[0]} for a "
                              f"{arch.n_layers}-layer Qwen3 (the base config disagrees with the weights?)")
    if arch.tie_embeddings and "lm_head.weight" in t and not torch.equal(t["lm_head.weight"], t["embed_tokens.weight"]):
        raise CheckpointError(f"{where}: the base config ties the head to the embedding but lm_head.weight differs "
                              f"from embed_tokens.weight")
    return backbone_state(t, arch, rows, where)


# -- tokenizer --------------------------------------------------------------------------------------------
def official_tokenizer(directory: str | Path, cfg: dict) -> Tokenizer:
    """tokenizer.json with the bos/eos/pad/mask roles of config.json's ids (tokenizer_config.json /
    special_tokens_map.json for null ids; a missing bos or pad becomes eos, as the official code sets them)."""
    from tokenizers import Tokenizer as HFTokenizer

    directory = Path(directory)
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no tokenizer.json (only fast tokenizers are supported)")
    try:
        backend = HFTokenizer.from_file(native_path(path))
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable tokenizer ({_one_line(e)})") from None
    tcfg = _read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
    special = _read_json(directory / "special_tokens_map.json") if (directory / "special_tokens_map.json").is_file() else {}
    tok_cfg = cfg.get("tokenization_config") if isinstance(cfg.get("tokenization_config"), dict) else {}

    def role(name: str) -> str | None:
        i = cfg.get(f"{name}_token_id")
        i = tok_cfg.get(f"{name}_token_id") if i is None else i
        if isinstance(i, int) and not isinstance(i, bool):
            token = backend.id_to_token(i)
            if token is None or backend.token_to_id(token) != i:
                raise CheckpointError(f"{path}: config.json's {name}_token_id={i} is not a token of the tokenizer")
            return token
        for source in (tcfg, special):
            value = source.get(f"{name}_token")
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str) and backend.token_to_id(value) is not None:
                return value
        return None

    eos = role("eos") or role("bos") or ("<|endoftext|>" if backend.token_to_id("<|endoftext|>") is not None else
                                         role("sep"))
    roles = {"bos": role("bos") or eos, "eos": eos, "pad": role("pad") or eos, "mask": role("mask")}
    missing = [r for r, tok in roles.items() if tok is None]
    if missing:
        raise CheckpointError(f"{directory}: no {' / '.join(missing)} token in config.json or the tokenizer files")
    tokenizer = Tokenizer(backend, f"official:{directory.resolve().name}", roles["bos"], roles["eos"], roles["pad"],
                          roles["mask"])
    tokenizer.add_bos = bool(cfg.get("keep_clean_bos"))
    template = tcfg.get("chat_template") if isinstance(tcfg.get("chat_template"), str) else ""
    if not template and (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    tokenizer.chat = chat_template(template, {f"{r}_token": t for r, t in roles.items() if r != "mask"}, backend)
    return tokenizer


# -- the loader -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OfficialInfo:
    """What an official config.json says, in this project's terms."""
    paradigm: str
    kind: str             # dit, dit_legacy or qwen3
    length: int
    block_size: int | None
    max_block_size: int | None


def describe_official(directory: str | Path) -> tuple[OfficialInfo, dict]:
    """(OfficialInfo, the raw config) of an official checkpoint folder; CheckpointError if it cannot be mapped."""
    directory = Path(directory)
    path = directory / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json")
    cfg = _read_json(path)
    where = str(path)
    check_types(cfg, CONFIG_TYPES, where, CheckpointError)   # (a nested architectures list was a TypeError)
    paradigm, kind = official_paradigm(cfg, where), backbone_kind(cfg, where)
    L = _int(cfg.get("length"), "length", where)
    S = S_max = None
    if paradigm == "bd3lm":
        S = _int(cfg.get("block_size"), "block_size", where)
        if not 1 <= S <= L or L % S:
            raise CheckpointError(f"{where}: BD3LM block_size={S} must divide length={L}")
    elif paradigm == "setdlm":
        S, S_max = _set_sizes(cfg, directory, L, where)
    elif paradigm == "mdlm" and cfg.get("block_size") not in (None, L):
        raise CheckpointError(f"{where}: MDLM with block_size={cfg['block_size']} < length={L} is a BD3LM")
    return OfficialInfo(paradigm, kind, L, S, S_max), cfg


def load_official(directory: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """(ParadigmModel in eval mode, Tokenizer) of an official `save_pretrained` folder (module docstring)."""
    from ..types import ModelConfig

    directory = Path(directory)
    info, cfg = describe_official(directory)
    where = str(directory)
    tensors = read_official_weights(directory)
    bc = cfg["backbone_config"]
    L = info.length
    if info.kind == "qwen3":
        t = _qwen3_tensors(tensors, where)
        if "embed_tokens.weight" not in t:
            raise CheckpointError(f"{where}: missing tensor backbone.model.model.embed_tokens.weight")
        rows = int(t["embed_tokens.weight"].shape[0])
        arch = _qwen3_arch(bc, t, directory, L, where)
        state, spec = _qwen3_state(t, arch, rows, where), BackboneSpec("llama", arch, source=where)
    else:
        state = _dit_state(tensors, where)
        if "embed.weight" not in state:
            raise CheckpointError(f"{where}: missing tensor backbone.vocab_embed.embedding")
        rows = int(state["embed.weight"].shape[0])
        arch = _dit_arch(bc, info.kind, str(directory / "config.json"))
        spec = BackboneSpec(info.kind, arch, source=where)
    tensors.clear()
    vocab = cfg.get("vocab_size")
    if vocab is not None and vocab != rows:
        raise CheckpointError(f"{where}: config.json says vocab_size={vocab} but the embedding has {rows} rows")
    tokenizer = official_tokenizer(directory, cfg)
    if tokenizer.vocab_size > rows:
        raise CheckpointError(f"{where}: the tokenizer has {tokenizer.vocab_size} tokens but the embedding {rows} rows")
    config = ModelConfig(paradigm=info.paradigm, vocab_size=rows, length=L, backbone=spec, mask_id=tokenizer.mask_id,
                         eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, block_size=info.block_size,
                         max_block_size=info.max_block_size)
    return assemble(config, state, where, device, dtype), tokenizer


__all__ = ["OfficialInfo", "describe_official", "is_official_checkpoint", "load_official", "official_paradigm",
           "official_tokenizer", "read_official_weights"]
