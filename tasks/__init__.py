"""Evaluation tasks on real data, offline: one declarative Task per benchmark (see tasks/base.py).

    from tasks import get_task
    task = get_task("gsm8k", max_new_tokens=128)             # embedded data (default)
    task = get_task("cnndm", data_path="my_articles.jsonl")  # a user file (--data)
    task = get_task("gsm8k", source="hf")                    # the Hugging Face dataset (online)
    examples = task.select(task.examples(tokenizer, 256), limit=10)

Task names: gsm8k, roc_infill1, roc_infill3, cnndm, ppl_owt, ppl_lm1b, ppl_wikitext, ppl_file,
genppl, mauve, and on synthetic oracle languages (tasks/oracle.py) oracle_nll, oracle_gen,
oracle_kl, oracle_offsets, oracle_greedy, oracle_infill, and the dependency tasks (tasks/dependency.py) list_copy,
list_reverse, list_sort, list_insert, list_remove, list_replace, list_shuffle, latin4, with their oracle view oracle_ops
(tasks/oracle_ops.py) (TASKS below is the list). The training corpus of the CPU presets is in tasks/corpus.py.

    python -c "import tasks; print(list(tasks.TASKS))"
"""

from __future__ import annotations

import inspect

from models.errors import unknown
from typing import Any

from tasks.base import (
    Example, GenerateRequest, InfillRequest, MetricValue, NllOutput, NllRequest, Output, Request, Task, TaskError,
    TextOutput,
)
from tasks.cnndm import CNNDM
from tasks.dependency import DEPENDENCY_TASKS
from tasks.genppl import GenPPL
from tasks.gsm8k import GSM8K
from tasks.mauve_task import Mauve
from tasks.oracle import OracleGen, OracleGreedy, OracleInfill, OracleKL, OracleNll, OracleOffsets
from tasks.oracle_ops import OracleOps
from tasks.perplexity import PplFile, PplLm1b, PplOwt, PplWikitext
from tasks.rocstories import RocInfill1, RocInfill3

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (GSM8K, RocInfill1, RocInfill3, CNNDM, PplOwt, PplLm1b, PplWikitext, PplFile, GenPPL, Mauve,
                OracleNll, OracleGen, OracleKL, OracleOffsets, OracleGreedy, OracleInfill, *DEPENDENCY_TASKS,
                OracleOps)
}


def task_options(cls: type[Task]) -> list[str]:
    """The keyword options a task accepts (its own knobs and the data-source options)."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        for param in inspect.signature(init).parameters.values():
            if param.kind is param.POSITIONAL_OR_KEYWORD and param.name != "self" and param.name not in names:
                names.append(param.name)
    return names


def get_task(name: str, **options: Any) -> Task:
    """The task called `name`, built with `options`; TaskError for an unknown name or option."""
    cls = TASKS.get(name)
    if cls is None:
        raise TaskError(unknown("task", name, TASKS))
    extra = sorted(set(options) - set(task_options(cls)))
    if extra:
        raise TaskError(f"task {name}: {unknown('option', extra, task_options(cls))}")
    return cls(**options)


__all__ = [
    "TASKS", "Example", "GenerateRequest", "InfillRequest", "MetricValue", "NllOutput", "NllRequest", "Output",
    "Request", "Task", "TaskError", "TextOutput", "get_task", "task_options",
]
