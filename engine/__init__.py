"""safeshare's de-identification engine: a plain library (no network) for optimal, risk-gated de-identification.

    from engine import load_policy, deidentify, write_release
    result = deidentify(load_policy("policies/examples/adult-k5.yaml"))
    write_release(result, "out/adult-k5")

A pandas DataFrame can stand in for the policy's input (`deidentify(policy, data=frame)`; `result.released` is the
released DataFrame), and `risk_report(frame, quasi_identifiers=[...], population="USA")` answers `safeshare risk`'s
questions without a policy file (engine.frames).
"""
__version__ = "0.1.0"

from .errors import InputError  # noqa: E402

_LAZY = {"Hierarchy": "hierarchy", "DatasetPolicy": "policy", "load_policy": "policy", "deidentify": "deid",
         "write_release": "deid", "NoSolutionError": "deid", "DeidResult": "deid", "risk_report": "frames"}


def __getattr__(name: str):
    # numpy, pandas, pydantic and pyarrow load when first used, so that `import engine` (and every `safeshare`
    # command that only registers its options) stays light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)


__all__ = ["DatasetPolicy", "DeidResult", "Hierarchy", "InputError", "NoSolutionError", "deidentify",
           "load_policy", "risk_report", "write_release"]
