"""A progress bar on stderr: env steps, the last evaluated success, ETA. tqdm when it is installed; else a small
one of its own (redrawn at most twice a second on a terminal; a line per 5% otherwise, e.g. in a log file)."""

from __future__ import annotations

import sys
import time
from typing import Optional


def _fmt(s: float) -> str:
    s = int(max(s, 0))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(self, total: int, label: str, start: int = 0, stream=None):
        self.total, self.label, self.start = total, label, start
        self.stream = stream or sys.stderr
        self.t0, self.last_draw, self.last_frac = time.monotonic(), 0.0, -1.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=label, unit="step", unit_scale=True, file=self.stream)
        except ImportError:
            self.bar = None

    def update(self, step: int, success: Optional[float]) -> None:
        ev = "-" if success is None else f"{success:.0%}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"eval {ev}", refresh=False)
            self.bar.update(step - self.bar.n)
            return
        now, frac = time.monotonic(), min(step / self.total, 1.0)
        if self.tty and now - self.last_draw < 0.5 and step < self.total:
            return
        if not self.tty and frac - self.last_frac < 0.05 and step < self.total:
            return
        self.last_draw, self.last_frac = now, frac
        rate = (step - self.start) / max(now - self.t0, 1e-9)
        # no ETA from the first few steps (the evaluation at step 0 would make it hours)
        eta = _fmt((self.total - step) / rate) if rate > 0 and step - self.start >= 0.02 * self.total else "?"
        width = 24
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        text = f"{self.label} [{bar}] {step}/{self.total} steps  eval {ev}  {_fmt(now - self.t0)} ETA {eta}"
        self.stream.write(("\r" + text + "\033[K") if self.tty else text + "\n")
        self.stream.flush()

    def write(self, line: str) -> None:
        """A line of its own above the bar (the bar is redrawn at the next update)."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
            return
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()
        self.last_draw = 0.0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            self.stream.write("\n")
            self.stream.flush()
