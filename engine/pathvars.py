"""`${NAME}` and `${NAME:-default}` in a dataset policy's file paths.

Why: a policy names its files relative to itself, which suits data that travels with the policy (the demo table in
the repository). Tables that live elsewhere on each machine (the benchmark tables, outside the repository) need one
policy that works wherever they are: `path: ${SAFESHARE_BENCHMARK_DATA:-../../../shared/data}/cup/cup.csv` reads
them from the folder the variable names, else from the default. Only the braced form is expanded, so a path holding
a plain `$` keeps meaning what it says.

Rules, chosen so that each piece of a path is relative to where it was written:
- a variable that is set (and not empty) gives its value; when the path starts with it and the value is relative,
  the value is relative to the working directory (where the variable was set), as in a shell;
- an unset or empty variable gives the default as written, relative to the policy file like any other path;
- an unset variable without a default is bad input naming the variable: a path is never guessed.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .errors import InputError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def variables(text: str) -> list[str]:
    """The variables a path names, in order."""
    return [match.group(1) for match in _VARIABLE.finditer(text)]


def expand(text: str, source: str | None, environ: Mapping[str, str] | None = None) -> str:
    """`text` with each `${NAME}` / `${NAME:-default}` replaced (rules in the module docstring); `source` is the policy
    file, named in the error for an unset variable without a default."""
    env = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name, "")
        if value:
            return os.path.abspath(value) if match.start() == 0 else value
        if default is not None:
            return default
        raise InputError(source, None, f"the path {text!r} names ${{{name}}}, which is not set (set {name}, or "
                                       f"give a default as ${{{name}:-DEFAULT}})")

    return _VARIABLE.sub(one, text)


def missing_hint(text: str) -> str:
    """What to add to a 'file does not exist' message for a path that came through variables ('' for none)."""
    names = variables(text)
    if not names:
        return ""
    state = ", ".join(f"{name}={os.environ[name]!r}" if os.environ.get(name) else f"{name} is not set"
                      for name in dict.fromkeys(names))
    return (f" (the policy's path is {text!r}; {state}: set {names[0]} to the folder that holds these files, see "
            "the README's 'Data' section)")
