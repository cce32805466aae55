"""The fenced shell commands of README.md and docs/*.md, and how tests/test_doc_commands.py runs them offline.

Every command in a ```bash / ```sh block is either run by the slow test, with the substitutions below (the dLLM
fixtures and a tiny Hugging Face checkpoint standing in for hub ids and `path/to/...`, smaller limits and lengths,
results and caches in a scratch folder), or marked in the page itself by a comment a reader sees: MARKER (on the
command's own line, or on a comment line of its own just above it). A block runs as one bash script (its variables and
exports carry from command to command), each command's exit status recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "dllm"
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
MARKER = re.compile(r"#.*\b(needs a GPU|needs the network|takes long|takes hours)\b")
FENCE = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.S | re.M)

# (text in the page, what the test runs instead): hub checkpoints by their fixtures, sizes by small ones.
# {C}: the dLLM fixtures as the published instruct checkpoints are, with their family's chat template
# (tests/test_chat.py with_template), {HF}: a tiny random Llama in the Hugging Face layout, {TMP}: the scratch folder.
SUBSTITUTIONS = (
    ("path/to/LLaDA-8B-Instruct", "{C}/LLaDA-8B-Instruct"),
    ("path/to/SDAR-8B-Chat", "{C}/SDAR-8B-Chat"),
    ("path/to/SDAR-4B-Chat", "{C}/SDAR-8B-Chat"),
    ("path/to/Dream", "{C}/Dream-v0-Instruct-7B"),
    ("path/to/hf_dir", "{HF}"),
    ("--max-new-tokens 256", "--max-new-tokens 32"),
    ("llada(steps=256,block_length=32)", "llada(steps=32,block_length=8)"),
    ("dream(steps:256;alg:entropy)", "dream(steps:32;alg:entropy)"),
    ("--steps 256 --chunk-size 32", "--steps 32 --chunk-size 8"),
    ("--limit 50", "--limit 2"), ("--limit 20", "--limit 2"), ("--limit 10", "--limit 2"), ("--limit 5", "--limit 2"),
    ("--length 512 --steps 1000", "--length 64 --steps 2"),
)
# appended to a command by its program: results and figures into the scratch folder, lm-eval kept to 2 documents and
# a generation length that fits the fixtures' 256-token context
APPEND = (
    ("python -m harness.run ", "--out {TMP}/results"),
    # the report after the (long) cell above it: the committed cpu results stand in for the reader's, in a copy
    ("python -m harness.report", "--results {TMP}/reference --plots {TMP}/plots"),
    ("harness-lm-eval run", "--limit 2 --gen_kwargs max_gen_toks=32"),
)
PROGRAMS = ("python -m harness.", "python -m models.", "harness-lm-eval ", "CKPT=$(python -m harness.train", "export ")
PLACEHOLDER = re.compile(r"path/to/[\w.-]+")


@dataclass(frozen=True)
class Command:
    page: str
    line: int          # of its first line in the page
    text: str          # continuation lines joined, the trailing comment dropped
    marked: str | None  # the marker text, if the page marks it

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def commands() -> list[list[Command]]:
    """Every fenced shell block of the pages, as its commands (in page order)."""
    blocks = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            first = text[:m.start(1)].count("\n") + 1
            out, pending, above = [], "", None
            start = first
            for i, raw in enumerate(m.group(1).splitlines()):
                line = raw.rstrip()
                if not pending and (not line or line.lstrip().startswith("#")):
                    hit = MARKER.search(line)
                    above = hit.group(1) if hit else above if line else None
                    continue
                if not pending:
                    start = first + i
                pending += line[:-1] + " " if line.endswith("\\") else line
                if line.endswith("\\"):
                    continue
                code, _, comment = pending.partition("  #")
                hit = MARKER.search("#" + comment) if comment else None
                out.append(Command(page, start, " ".join(code.split()), hit.group(1) if hit else above))
                pending, above = "", None
            blocks.append(out)
    return blocks


def substituted(command: Command, values: dict[str, str]) -> str:
    """The command as the slow test runs it (SUBSTITUTIONS, then APPEND)."""
    text = command.text
    for old, new in SUBSTITUTIONS:
        text = text.replace(old, new.format(**values))
    for program, extra in APPEND:
        if program in text:
            text = f"{text} {extra.format(**values)}"
    return text


def uncovered(command: Command) -> str | None:
    """Why the slow test could not run an unmarked command offline, or None."""
    if command.marked:
        return None
    if not command.text.startswith(PROGRAMS):
        return f"{command.where()}: {command.text[:60]!r} is not a harness command (mark it, or add it to PROGRAMS)"
    left = PLACEHOLDER.findall(substituted(command, {"C": "C", "HF": "HF", "TMP": "TMP"}))
    if left:
        return f"{command.where()}: no substitution for {left} (add one to SUBSTITUTIONS, or mark the command)"
    return None
