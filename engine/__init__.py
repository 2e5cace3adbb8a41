"""safeshare's de-identification engine: a plain library (no network) for optimal, risk-gated de-identification.

    from engine import load_policy, deidentify, write_release
    result = deidentify(load_policy("policies/examples/adult-k5.yaml"))
    write_release(result, "out/adult-k5")
"""
__version__ = "0.1.0"

from .errors import InputError  # noqa: E402
from .hierarchy import Hierarchy  # noqa: E402
from .policy import DatasetPolicy, load_policy  # noqa: E402


def __getattr__(name: str):
    # The pipeline pulls in pandas and pyarrow; import it lazily so `import engine` stays light.
    if name in {"deidentify", "write_release", "NoSolutionError", "DeidResult"}:
        from . import deid

        return getattr(deid, name)
    raise AttributeError(name)


__all__ = ["DatasetPolicy", "DeidResult", "Hierarchy", "InputError", "NoSolutionError", "deidentify",
           "load_policy", "write_release"]
