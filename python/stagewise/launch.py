"""Start a `stagewise serve` or `stagewise run` process on a loopback port (tests, examples, benchmarks)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import List, Optional, Sequence

from .errors import ServeError


def repo_root() -> Path:
    """The checkout this package sits in (python/stagewise/..): where `serve` finds `models/`."""
    return Path(__file__).resolve().parents[2]


def find_binary() -> str:
    """The `stagewise` binary: $STAGEWISE_BIN, else the one installed with this package (`pip install` of the
    wheel puts it in the environment's scripts folder, `<venv>/bin/`, whether or not that is on PATH), else
    `stagewise` on PATH, else the repository's debug build."""
    env = os.environ.get("STAGEWISE_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"STAGEWISE_BIN={env} is not an executable file")
        return env
    installed = Path(sysconfig.get_path("scripts")) / "stagewise"
    if installed.is_file() and os.access(installed, os.X_OK):
        return str(installed)
    on_path = shutil.which("stagewise")
    if on_path:
        return on_path
    repo = repo_root()
    target = os.environ.get("CARGO_TARGET_DIR") or str(repo / "target")
    for profile in ("debug", "release"):
        p = Path(target) / profile / "stagewise"
        if p.is_file():
            return str(p)
    raise FileNotFoundError(
        "no stagewise binary: build it (`cargo build`) or set STAGEWISE_BIN to its path"
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, even by SIGKILL, so that a learner's servers
    do not outlive it (elsewhere: nothing; the servers then stop only when killed)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Process:
    """A stagewise subcommand listening on `tcp/127.0.0.1:<port>` with multicast scouting off; killed on
    :meth:`stop` (or leaving the `with` block). Its output goes to `log` (a file path) when given."""

    def __init__(self, subcommand: str, args: Sequence[str] = (), *, log: Optional[str] = None, cwd=None,
                 die_with_parent: bool = False):
        self.port = free_port()
        self.endpoint = f"tcp/127.0.0.1:{self.port}"
        self.argv: List[str] = [
            find_binary(),
            subcommand,
            *args,
            "--listen",
            self.endpoint,
        ]
        self.log = log
        self._out = open(log, "wb") if log else subprocess.DEVNULL
        repo = repo_root()
        # A log file gets no terminal colours (tracing honours NO_COLOR).
        env = {**os.environ, "NO_COLOR": "1"} if log else None
        self.proc = subprocess.Popen(
            self.argv, stdout=self._out, stderr=subprocess.STDOUT, env=env,
            cwd=cwd or (repo if (repo / "models").is_dir() else None),
            preexec_fn=_die_with_parent if die_with_parent else None,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return Path(self.log).read_text(errors="replace") if self.log else ""

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not subprocess.DEVNULL:
            self._out.close()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def serve(*args: str, log: Optional[str] = None, die_with_parent: bool = False) -> Process:
    """`stagewise serve ARGS --listen tcp/127.0.0.1:PORT`; connect to `.endpoint`.
    `die_with_parent`: the server gets SIGTERM when this process dies, however it dies (Linux)."""
    return Process("serve", args, log=log, die_with_parent=die_with_parent)


def run(*args: str, log: Optional[str] = None) -> Process:
    """`stagewise run ARGS --listen tcp/127.0.0.1:PORT`."""
    return Process("run", args, log=log)


def log_tail(p: Process, lines: int = 15) -> str:
    """The end of a process's log: from its error (`Error:`, or clap's `error:`) when it wrote one, without the
    backtrace; else its last lines."""
    text = p.output().split("Stack backtrace:")[0].strip().splitlines()
    starts = [i for i, line in enumerate(text) if line.startswith(("Error:", "error:"))]
    text = text[starts[-1]:] if starts else text
    return "\n    ".join(text[-lines:]) if text else "(no output)"


def serve_died(p: Process, what: str) -> ServeError:
    """The error for a server that exited (its exit code) or does not answer, with the end of its log."""
    code = p.proc.poll()
    state = f"exited with code {code}" if code is not None else "is running but does not answer"
    return ServeError(f"{what}: `{' '.join(p.argv[1:])}` {state} (log {p.log}):\n    {log_tail(p)}")


def wait_for_output(p: Process, text: str, timeout: float) -> bool:
    """Polls the process log until it contains `text` (True) or `timeout` passes / the process exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in p.output():
            return True
        if not p.alive():
            return text in p.output()
        time.sleep(0.05)
    return False
