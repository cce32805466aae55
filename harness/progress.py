"""Progress reporting that reads well in a terminal and in a log.

On a terminal, a tqdm bar. Anywhere else (a pipe, `| tee`, nohup, CI) carriage-return refreshes
would pile up as fragments on one line, so progress is printed as occasional plain lines instead:
one when a bar starts, one each time another 10% is done or `HARNESS_PROGRESS_INTERVAL` seconds
(default 30) have passed, and one when it ends: "done", or "stopped" when it ends short of its total
(an interrupt). Bars marked `transient` (a cell's examples) are dropped in a log: the sweep's own
lines cover them.

`HARNESS_PROGRESS=bar|lines|off` forces a style.

    HARNESS_PROGRESS=lines python -m harness.run --sweep --preset smoke 2>&1 | tee sweep.log
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from tqdm.auto import tqdm

from models.text import printable

STYLES = ("bar", "lines", "off")


def style(stream: TextIO) -> str:
    forced = os.environ.get("HARNESS_PROGRESS", "").strip().lower()
    if forced in STYLES:
        return forced
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def progress(total: int, desc: str, initial: int = 0, enabled: bool = True, transient: bool = False,
             file: TextIO | None = None):
    """A progress object with tqdm's `update`, `set_postfix`, `set_postfix_str` and `close`."""
    stream = file if file is not None else sys.stderr
    chosen = style(stream) if enabled else "off"
    if chosen == "bar":
        return tqdm(total=total, initial=initial, desc=printable(desc), leave=not transient, dynamic_ncols=True,
                    file=stream)
    if chosen == "off" or transient:
        return tqdm(total=total, disable=True)
    return LineProgress(total, desc, initial, stream)


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class LineProgress:
    """Plain progress lines: at the start, every 10% or `interval` seconds, and at the end."""

    def __init__(self, total: int, desc: str, initial: int = 0, file: TextIO | None = None,
                 interval: float | None = None):
        self.total, self.desc, self.n, self.start_n = max(int(total), 0), desc, int(initial), int(initial)
        self.file = file if file is not None else sys.stderr
        self.interval = interval if interval is not None else float(os.environ.get("HARNESS_PROGRESS_INTERVAL", 30))
        self.postfix = ""
        self.t0 = self.last = time.monotonic()
        self.next_decile = self._decile(self.n) + 1
        self.closed = False
        self._print()

    def _decile(self, n: int) -> int:
        return 10 * n // self.total if self.total else 10

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.n >= self.total:      # the closing line says it
            return
        if self._decile(self.n) >= self.next_decile or now - self.last >= self.interval:
            self.next_decile = self._decile(self.n) + 1
            self._print(now)

    def set_postfix(self, refresh: bool = False, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str = "", refresh: bool = False) -> None:
        self.postfix = text

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.n != self.start_n or self.total == 0:
                self._print(final=True)

    def _print(self, now: float | None = None, final: bool = False) -> None:
        now = time.monotonic() if now is None else now
        self.last = now
        elapsed = now - self.t0
        parts = [f"{self.desc}: {self.n}/{self.total}"]
        if self.total:
            parts[0] += f" ({100 * self.n // self.total}%)"
        if self.n > self.start_n:
            parts.append(f"{format_duration(elapsed)} elapsed")
            if not final and self.n < self.total:
                left = elapsed / (self.n - self.start_n) * (self.total - self.n)
                parts.append(f"~{format_duration(left)} left")
        if final:   # a bar closed short of its total was stopped (an interrupt, an error), not finished
            parts.append("done" if self.n >= self.total else "stopped")
        if self.postfix:
            parts.append(self.postfix)
        print(printable(f"[{time.strftime('%H:%M:%S')}] " + ", ".join(parts)), file=self.file, flush=True)
