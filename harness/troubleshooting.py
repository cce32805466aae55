"""Troubleshooting: every input the command lines refuse, what the one `error:` line says, and what to do.

THE list of refused inputs. tests/test_bad_input.py runs each case (by its id) and asserts that the command exits 2
with exactly one `error:` line containing `says`, so the table the docs render from here shows the messages as the
code prints them. `common` marks the five that users meet most.

    python -c "from harness.troubleshooting import markdown; print(markdown(common=True))"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One refused input: `did` what the user did, `says` a fragment of the `error:` line (asserted by the tests),
    `fix` what to do, in one sentence."""

    id: str
    did: str
    says: str
    fix: str
    common: bool = False


CASES: tuple[Case, ...] = (
    # harness.run: data files
    Case("malformed_jsonl", "`--data` file with a line that is not JSON", ":2: malformed JSON line",
         "Fix the named line of the file: one JSON object per line.", common=True),
    Case("missing_field", "`--data` file whose line lacks a field the task reads", ":2: missing field 'answer'",
         "Give every line the fields of the task's documented format."),
    Case("empty_dataset", "`--data` file with no examples", "task gsm8k: no examples in",
         "Give a file with at least one example."),
    Case("data_wrong_format_txt", "`--data questions.txt` for a task that reads records", "a .txt file holds no records",
         "Give a .jsonl (or .csv) file in the task's format."),
    Case("data_wrong_extension", "`--data` file of a type the tasks do not read", "unsupported file type '.json'",
         "Convert it to .jsonl, one object per line."),
    Case("data_missing_file", "`--data` path that does not exist", "data file not found",
         "Check the path (relative paths start at the working directory)."),
    Case("data_a_device", "`--data` naming a device or link to one (/dev/zero)", "not a regular file",
         "Give a regular file."),
    Case("data_integer_of_5000_digits", "`--data` file holding a number of thousands of digits",
         "digits.jsonl:1: malformed JSON line (an integer of too many digits",
         "Write such a value as a string, or shorten it."),
    # diffusion LMs (models/dllm.py) and their own samplers
    Case("dllm_steps_not_a_multiple_of_the_blocks", "`--model LLaDA-8B-Instruct --task gsm8k --sampler "
         "\"llada(steps=256,block_length=32)\"` (the preset's GSM8K length is 96)",
         "steps=256 is not a multiple of the 3 blocks of block_length=32 in the generation length 96",
         "Give the length LLaDA's rule needs: `--max-new-tokens 256` (a multiple of block_length whose number of "
         "blocks divides steps); through lm-eval, a max_gen_toks that still fits after the prompt."),
    Case("dllm_family_sampler_infill", "`--task roc_infill1 --sampler llada` (a family's own sampler on infilling)",
         "does not infill", "Infill with our decoders (`--sampler harness`, or no --sampler); a family's own sampler "
         "continues a prompt only."),
    Case("dllm_fastdllm_v2_with_our_decoder", "`--model Fast_dLLM_v2_7B --threshold 0.9` (our block decoder)",
         "decodes with its own sampler only", "Decode it with `--sampler \"fastdllm_v2(threshold=0.9)\"` (or no "
         "decoding flag: its own sampler is the default); its GSM8K rows say the answer likelihood is not available."),
    Case("dllm_moe_refused", "`--model` a LLaDA-MoE / LLaDA2 / SDAR-MoE / RND1 checkpoint",
         "is a mixture-of-experts diffusion LM, which is not supported",
         "Use a dense checkpoint of a supported family (LLaDA, Dream, SDAR / TraDo, Fast-dLLM v2)."),
    # names and decoding knobs
    Case("unknown_paradigm", "`--paradigm gpt`", "unknown paradigm 'gpt'", "Use one of the listed names.", common=True),
    Case("unknown_task", "`--task gsm9k`", "unknown task 'gsm9k'", "Use one of the listed names.", common=True),
    Case("unknown_preset", "`--preset huge`", "unknown preset 'huge'", "Use one of the listed names."),
    Case("window_larger_than_context", "`--window 200` on a 128-token model",
         "SetDLM window W=200 exceeds the context length L=128", "Give a window no larger than the context length."),
    Case("tau_above_one", "`--threshold 1.5`", "threshold must be in (0, 1]", "Give a threshold in (0, 1], or none."),
    Case("tau_zero", "`--threshold 0`", "threshold must be in (0, 1]", "Give a threshold in (0, 1], or none."),
    Case("bd3lm_block_not_dividing_L", "`--decode-block 3` for a BD3LM of context 128",
         "BD3LM decode block size 3 must divide the context length L=128", "Give a block size that divides L."),
    Case("limit_zero", "`--limit 0`", "--limit must be a positive number of examples, got 0",
         "Give --limit 1 or more, or leave it out for the preset's."),
    Case("limit_negative", "`--limit -3`", "--limit must be a positive number of examples, got -3",
         "Give --limit 1 or more, or leave it out for the preset's."),
    Case("use_cache_not_a_bool", "`--use-cache maybe`", "use_cache='maybe': expected true or false",
         "Give true or false."),
    Case("seed_too_large", "`--seed 10**30`", "argument --seed: must be >= 0 and < 4294967296",
         "Give a seed below 2^32."),
    Case("policy_unknown", "`--policy greedy`", "unknown policy 'greedy'; valid: confidence",
         "Use one of the listed policies."),
    Case("policy_parameter_out_of_range", "`--policy margin(tau=2)`", "policy margin: tau must be in (0, 1], got 2.0",
         "Give the parameter a value in its range."),
    Case("policy_parameter_unbounded", "`--policy topk(k=10**20)`",
         "policy topk: k must be a whole number in [1, 16,777,216]", "Give a value in its declared range."),
    Case("jobs_not_a_number", "`--jobs many`", "argument --jobs: expected auto or a whole number >= 1, got 'many'",
         "Give auto or a number of workers."),
    Case("jobs_on_ray", "`--jobs 2 --launcher ray`", "--jobs applies to --launcher local",
         "Leave --jobs out with Ray (it schedules the tasks)."),
    Case("jobs_with_delete_downloads", "`--jobs 2 --delete-downloads`", "use it with --jobs 1",
         "Run with --jobs 1 to delete each download after its cells."),
    # checkpoints and model files
    Case("roc_span_longer_than_context", "a ROCStories infilling task on a 16-token model",
         "does not fit in a context of 16", "Use a model with a longer context, or a shorter task."),
    Case("checkpoint_missing", "`--checkpoint` folder that does not exist", "does not exist",
         "Check the path, or train one with python -m harness.train.", common=True),
    Case("checkpoint_without_config", "a checkpoint folder without config.json", "has no config.json",
         "Save checkpoints with models.save (or python -m harness.train); copy the whole folder."),
    Case("checkpoint_without_weights", "a checkpoint folder without model.safetensors", "has no model.safetensors",
         "Copy the whole checkpoint folder."),
    Case("checkpoint_without_tokenizer", "a checkpoint folder without tokenizer.json", "has no tokenizer.json",
         "Copy the whole checkpoint folder."),
    Case("checkpoint_corrupt_tokenizer", "a checkpoint whose tokenizer.json is damaged", "unreadable tokenizer files",
         "Copy the checkpoint again, or retrain it."),
    Case("checkpoint_corrupt_safetensors", "a checkpoint whose weights file is truncated",
         "is not a readable safetensors file", "Copy the checkpoint again, or retrain it."),
    Case("checkpoint_of_another_paradigm", "`--checkpoint` of a SetDLM with `--paradigm ar`",
         "holds a 'setdlm' model, not 'ar'", "Drop --paradigm, or give the paradigm the checkpoint holds."),
    Case("checkpoint_schema_version", "a checkpoint written by an incompatible version",
         "has schema version 0, this code reads versions 1, 2", "Retrain it with this version."),
    Case("checkpoint_weights_nan", "a checkpoint whose weights hold NaN or infinities", "holds non-finite values",
         "Retrain it (a lower --lr keeps training finite)."),
    Case("checkpoint_config_nested_too_deeply", "a checkpoint config.json nested thousands of levels deep",
         "is not valid JSON (nested too deeply", "Use the config.json models.save wrote."),
    Case("checkpoint_config_zero_heads", "a checkpoint config.json with n_heads 0",
         "n_heads must be a whole number in [1, 16,777,216], got '0'", "Give the field a value in its range."),
    Case("checkpoint_config_huge_vocabulary", "a checkpoint config.json with a vocabulary of 2^40 tokens",
         "vocab_size must be a whole number in [0, 16,777,216]", "Give the field a value in its range."),
    Case("checkpoint_config_a_json_list", "a checkpoint config.json that is a JSON list",
         "config.json holds a JSON list, not an object", "Use the config.json models.save wrote."),
    Case("checkpoint_model_id_a_path", "a checkpoint whose model_id is a path ('../../victim')",
         "config.json model_id '../../../../victim' is not a safe name", "Give model_id a plain name."),
    Case("checkpoint_tokenizer_larger_than_model", "a checkpoint whose tokenizer has more tokens than the model",
         "tokens but the model's vocab_size is", "Save the model with the tokenizer it was trained with."),
    Case("checkpoint_tokenizer_smaller_than_model", "a checkpoint whose tokenizer has fewer tokens than the model",
         "tokens but the model's vocab_size is", "Save the model with the tokenizer it was trained with."),
    Case("checkpoint_config_rope_base_zero", "a checkpoint config.json with rope_base 0",
         "rope_base must be a finite number > 0", "Give a positive rotary base (10000 is usual)."),
    Case("checkpoint_extra_tensor", "a checkpoint holding a tensor its config does not describe",
         "tensor 'extra.weight' (4, 4) is not in the model of config.json",
         "Save the model with models.save, or remove the tensor."),
    Case("hf_shard_outside_the_folder", "a Hugging Face index naming a shard outside its folder",
         "is not a plain file name", "Keep every shard in the model's folder, named plainly in the index."),
    Case("gguf_header_larger_than_its_metadata", "a GGUF whose tensors are larger than its metadata says",
         "tensor 'output.weight' has shape (768, 32), but the metadata implies (96, 32)",
         "Convert the model again with llama.cpp's convert_hf_to_gguf.py."),
    Case("gguf_tokens_not_strings", "a GGUF whose tokenizer.ggml.tokens holds integers",
         "tokenizer.ggml.tokens must be a list of strings", "Convert the model again with llama.cpp's converter."),
    Case("ray_checkpoint_file_symlinked_outside_its_folder", "`--launcher ray` with a checkpoint file linked elsewhere",
         ", outside the checkpoint's folder", "Copy the file into the checkpoint's folder instead of linking it."),
    # results folders
    Case("results_of_another_schema", "`--out` holding results of an incompatible version",
         "holds results of schema version 0, this code writes version", "Give another --out, or move the old one."),
    Case("results_with_a_corrupt_line", "`--out` whose runs.jsonl has a damaged line",
         "runs.jsonl:2: corrupt results line", "Delete or repair the named line; the other rows are kept."),
    Case("results_row_a_bare_number", "`--out` whose runs.jsonl holds a bare number",
         "runs.jsonl:1: corrupt results line (a JSON int, not an object)", "Delete or repair the named line."),
    Case("results_row_a_list", "`--out` whose runs.jsonl holds a JSON list",
         "runs.jsonl:1: corrupt results line (a JSON list, not an object)", "Delete or repair the named line."),
    Case("results_row_without_run_id", "`--out` whose runs.jsonl has a row without run_id",
         "runs.jsonl:1: corrupt results line (no 'run_id')", "Delete or repair the named line."),
    Case("example_row_without_example_id", "`--out` with an examples file row without example_id",
         "0123456789abcdef.jsonl:2: corrupt results line (no 'example_id')", "Delete or repair the named line."),
    Case("results_directory_read_only_for_a_finished_cell", "`--out` you may not write to",
         "(permission denied", "Give an --out you can write to.", common=True),
    Case("out_is_a_file", "`--out` naming a file", "is a file, not a directory", "Give a folder as --out."),
    Case("out_under_an_unknown_user", "`--out ~nosuchuser/x`", "there is no user 'nosuchuser' on this machine",
         "Name an existing user's home, or a path without ~user."),
    Case("results_lock_a_symlink", "`--out` whose .lock is a symlink", ".lock is a symlink",
         "Remove the link; nothing is written through links."),
    Case("results_runs_hard_linked", "`--out` whose runs.jsonl is hard-linked elsewhere", "has 2 hard links",
         "Replace it with a copy; nothing is written through links."),
    Case("results_lock_hard_linked", "`--out` whose .lock is hard-linked elsewhere", "has 2 hard links",
         "Remove it; nothing is written through links."),
    Case("results_runs_a_fifo", "`--out` whose runs.jsonl is a FIFO", "runs.jsonl is not a regular file",
         "Remove it; results are regular files."),
    Case("working_directory_deleted", "the working directory deleted while a command runs",
         "the working directory was deleted or moved",
         "cd to a folder that exists and rerun; finished work is kept."),
    # harness.report
    Case("report_results_missing", "`python -m harness.report --results` that does not exist", "not found",
         "Run a sweep first, or give the folder it wrote."),
    Case("report_unknown_preset", "`python -m harness.report --preset cpux`", "no results for preset 'cpux' under",
         "Use one of the presets it found."),
    Case("report_row_a_list", "a runs.jsonl line that is a JSON list, in the report",
         "runs.jsonl:1: corrupt results line (a JSON list, not an object)", "Delete or repair the named line."),
    Case("report_unknown_paradigm", "a results row of an unknown paradigm, in the report",
         "runs.jsonl:1: unknown paradigm 'gpt'", "Delete or repair the named line."),
    Case("report_non_numeric_value", "a results row whose value is text", "runs.jsonl:1: value 'high' is not a number",
         "Delete or repair the named line."),
    Case("report_task_names_a_path_outside", "a results row whose task is a path",
         "task '../../../outside/x' is not a safe name", "Delete or repair the row; task names are plain names."),
    Case("report_infinite_throughput", "a results row with an infinite throughput",
         "runs.jsonl:1: corrupt results line (Infinity is not a JSON number)", "Delete or repair the named line."),
    Case("report_threshold_above_one", "a results row with threshold 5",
         "runs.jsonl:1: threshold 5 is not in (0, 1]", "Delete or repair the named line."),
    Case("report_primary_not_a_bool", "a results row whose primary is 'no'",
         "runs.jsonl:1: primary 'no' is not true or false", "Delete or repair the named line."),
    Case("report_policy_unknown", "a results row with an unknown policy",
         "runs.jsonl:1: policy: unknown policy 'bogus'", "Delete or repair the named line."),
    Case("report_tables_a_symlink", "a `<preset>/tables` folder that is a symlink", "tables is a symlink",
         "Remove the link; nothing is written through links."),
    Case("report_row_of_a_newer_schema", "a results row of another (newer) schema version, in the report",
         "runs.jsonl:1 holds results of schema version 2, this code writes version 1",
         "Report it with the version that wrote it, or move the file away."),
    Case("report_integer_of_5000_digits", "a results row holding a number of thousands of digits",
         "runs.jsonl:1: corrupt results line (an integer of too many digits)", "Delete or repair the named line."),
    # harness.train and the caches
    Case("train_length_zero", "`python -m harness.train --length 0`", "argument --length: must be >= 2, got 0",
         "Give a context of 2 tokens or more."),
    Case("train_lr_not_a_number", "`python -m harness.train --lr fast`",
         "argument --lr: expected a number, got 'fast'", "Give a number, e.g. --lr 3e-4."),
    Case("train_tokenizer_negative_vocab", "`python -m harness.train --tokenizer bpe:-1`",
         "tokenizer 'bpe:-1': the vocabulary of bpe:<vocab> must be a whole number",
         "Give a vocabulary size, e.g. bpe:8000."),
    Case("train_corpus_offline", "`python -m harness.train --corpus hf:<name>` offline, or a name the hub lacks",
         "could not load it through `datasets`",
         "Go online with access to the dataset, or train on the embedded corpus (the default)."),
    Case("cache_a_file", "`HARNESS_CACHE` naming a file", "cachefile is a file, not a directory",
         "Point HARNESS_CACHE at a folder (or unset it)."),
    Case("cache_folder_a_symlink", "a cache folder that is a symlink", "tokenizers is a symlink",
         "Remove the link; nothing is written through links."),
    # harness.bench
    Case("bench_repeats_zero", "`python -m harness.bench decode --repeats 0`",
         "argument --repeats: must be >= 1, got 0", "Give 1 or more repeats."),
    # harness.lm_eval (lm-eval's CLI with our models)
    Case("lm_eval_unknown_knob", "lm-eval `--model_args ...,temprature=0.5`", "unknown model_args key 'temprature'",
         "Use one of the listed keys."),
    Case("lm_eval_wrong_paradigm", "lm-eval `--model setdlm` with an AR checkpoint",
         "--model setdlm was given a checkpoint that holds a 'ar' model",
         "Use --model with the checkpoint's paradigm, or --model harness."),
    Case("lm_eval_missing_checkpoint", "lm-eval `--model_args checkpoint=` a path that does not exist",
         "does not exist", "Check the path."),
    Case("lm_eval_threshold_5", "lm-eval `--model_args ...,threshold=5`", "threshold must be in (0, 1]",
         "Give a threshold in (0, 1], or none."),
    Case("lm_eval_window_abc", "lm-eval `--model_args ...,window=abc`", "window='abc': expected a whole",
         "Give a whole number."),
    Case("lm_eval_repetition_penalty_nan", "lm-eval `--model_args ...,repetition_penalty=nan`",
         "repetition_penalty must be a finite number > 0", "Give a finite number > 0 (1 for none)."),
    Case("lm_eval_policy_unknown", "lm-eval `--model_args ...,policy=greedy`", "unknown policy 'greedy'",
         "Use one of the listed policies."),
    Case("lm_eval_seed_too_large", "lm-eval `--model_args ...,seed=10**30`",
         "model_args seed must be a whole number in [0, 4294967295]", "Give a smaller seed."),
    Case("lm_eval_checkpoint_without_paradigm", "lm-eval with a checkpoint whose config names no paradigm",
         "the model section names no paradigm", "Use the config.json models.save wrote."),
)
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids are unique"


def case(case_id: str) -> Case:
    """The case called `case_id` (KeyError for another)."""
    return BY_ID[case_id]


def markdown(cases: tuple[Case, ...] | list[Case] | None = None, common: bool = False) -> str:
    """A Markdown table of `cases` (default: all of CASES; `common=True`: only the commonest five), with the columns
    what you did / what it says / what to do."""
    chosen = CASES if cases is None else tuple(cases)
    if common:
        chosen = tuple(c for c in chosen if c.common)
    rows = [f"| {_cell(c.did)} | ``error: …{_cell(c.says)}…`` | {_cell(c.fix)} |" for c in chosen]
    return "\n".join(["| what you did | what it says | what to do |", "|---|---|---|", *rows]) + "\n"


def _cell(text: str) -> str:
    """`text` inside a Markdown table cell: its pipes escaped."""
    return text.replace("|", "\\|")
