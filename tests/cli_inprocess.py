"""Run `safeshare ARGS` inside the test's interpreter: the same `safeshare.cli.main(argv)` that `python -m safeshare.cli`
runs, without paying a new interpreter and every component's imports (1-3 s each) per call.

Why: CLI tests check dozens of bad inputs; each one only needs the dispatcher's exit code and its stdout/stderr. Each
test file keeps one or two real subprocess runs per command, so the path from main's return value to the process's
exit code stays tested; the other checks run here and get a `subprocess.CompletedProcess` of the same shape, so their
assertions read the same. Not for commands that start servers or children, or depend on the working directory.
"""
from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stderr, redirect_stdout

from safeshare.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`safeshare ARGS` in process: its exit code (main's return value, or SystemExit's code as Python would make it,
    argparse's usage errors included), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # what the interpreter does with it: None is 0, an int is itself, else print + 1
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=err)
                code = 1
    return subprocess.CompletedProcess(["safeshare", *args], code, out.getvalue(), err.getvalue())
