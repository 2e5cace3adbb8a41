"""Output statistical disclosure control (SDC): the rules every result must meet before it may be requested.

A plain library (numpy, pandas-free hot paths, no web framework, no network), usable on a laptop and shared by the
analytics app (the researcher's side: checks shown when an output is saved) and the custodian service (the review
side). One job per module:

- `outputs.rules`: the rule set (ACRO's names and defaults) and where each number came from;
- `outputs.floor`: `SITE/outputs.yaml`, the site's floor, which a dataset policy may tighten and never relax;
- `outputs.checks`: per-cell statistics from integer codes (numpy) and the checks: threshold, zeros, NK dominance,
  p% ratio, negative values, degrees of freedom, structural zeros; the status of an output;
- `outputs.remedies`: suppression that really hides (also with margins), rounding, the OpenSAFELY profile;
- `outputs.differencing`: a table whose cohort differs from an earlier output's by fewer than the threshold;
- `outputs.acro_results`: ACRO's `results.json` layout, so SACRO's outputs viewer can read an exported request.

The rules are ACRO's (SACRO project, `acro` 1.0.2) with its defaults; the verdicts of the acceptance cases were
confirmed against acro 1.0.2 (tests/outputs). Where acro's own suppression leaks (integer labels with margins), ours
does not: `outputs.remedies.audit` proves it with linear-programming bounds.
"""
from __future__ import annotations

__all__ = ["acro_results", "checks", "differencing", "floor", "remedies", "rules"]
