"""The end of a sweep in about 20 lines: what ran and how long it took, what it found (each claim's verdict beside
the committed reference's), the figures to open first, and where everything is. The full tables stay in the files.

It reads only what the sweep and its report just wrote (<out>/<preset>/tables/claims.json) and, for the comparison,
the committed reference's claims table of the same preset.

    python -m harness.run --sweep          # prints it last
"""

from __future__ import annotations

import json
from pathlib import Path

from .progress import format_duration

FIRST_FIGURES = ("oracle_kl", "gsm8k", "roc_infill1")   # the oracle frontier first: the clearest result


def _verdict(text: str) -> str:
    """A verdict in one or two words (the reason after a colon stays in claims.md)."""
    return "not testable" if str(text).startswith("not testable") else str(text).partition(":")[0]


def _claims(path: Path) -> dict[int, dict]:
    if not path.is_file():
        return {}
    try:
        return {int(c["claim"]): c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}
    except (ValueError, KeyError, TypeError):
        return {}


def sweep_summary(preset: str, out: Path, plots: Path, cells: int, ran: int, seconds: float | None,
                  reference: Path | None) -> str:
    """The closing lines of a sweep of `preset` whose results are under `out` and figures under `plots`."""
    tables = Path(out) / preset / "tables"
    when = f" in {format_duration(seconds)}" if seconds is not None else ""
    lines = [f"done: {cells} cells of preset {preset} ({ran} evaluated now{when}, {cells - ran} from earlier runs)"]
    mine = _claims(tables / "claims.json")
    theirs = _claims(Path(reference) / preset / "tables" / "claims.json") if reference is not None else {}
    if mine:
        decided = sum(_verdict(c["verdict"]) in ("holds", "fails") for c in mine.values())
        lines.append(f"claims ({decided} of {len(mine)} decided; the committed reference in brackets where it "
                     f"differs):")
        for number, claim in sorted(mine.items()):
            verdict = _verdict(claim["verdict"])
            estimate = claim.get("estimate")
            est = f" {estimate:+.3g}" if isinstance(estimate, (int, float)) else ""
            ref = theirs.get(number)
            agree = "" if ref is None else (" (= reference)" if _verdict(ref["verdict"]) == verdict
                                             else f" [reference: {_verdict(ref['verdict'])}]")
            short = claim.get("short") or claim.get("statement", "")[:50]
            lines.append(f"  {number:>2}. {short:<46} {verdict}{est}{agree}")
    figures = [plots / f"{preset}-{task}.png" for task in FIRST_FIGURES if (plots / f"{preset}-{task}.png").is_file()]
    if figures:
        lines.append("open first: " + ", ".join(str(f) for f in figures))
    if not tables.is_dir():   # --no-report: say how to build them rather than name files that are not there
        lines.append(f"rows: {Path(out) / preset / 'runs.jsonl'}; tables and figures not built (--no-report): "
                     f"python -m harness.report --results {out} --plots {plots}")
        return "\n".join(lines)
    lines.append(f"everything: {tables / 'claims.md'} (every comparison), {tables} (one table per task), "
                 f"{Path(out) / preset / 'runs.jsonl'} (rows), {plots} (figures)")
    return "\n".join(lines)
