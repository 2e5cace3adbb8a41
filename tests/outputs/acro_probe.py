"""Run the acceptance cases through acro itself (an interpreter that has acro 1.0.2, which pins pandas<=2.3.3 and so
cannot live in the project's environment) and print its verdicts as JSON: per case the status and sdc.cells.

    /path/to/acro-venv/bin/python tests/outputs/acro_probe.py CASES.json > verdicts.json

Run from an empty folder: acro writes `acro_artifacts/` into the current directory. The cases are
tests/outputs/acro_verdicts.json's: micro-data from integer codes (one record per unit of a count; for the
magnitude cases one record per contribution), acro's default.yaml, suppression off; a case's `rules` are written
into acro's risk appetite."""
from __future__ import annotations

import json
import logging
import sys

import numpy as np
import pandas as pd


def micro(case: dict) -> pd.DataFrame:
    if "counts" in case:
        table = np.asarray(case["counts"])
        cells = np.repeat(np.arange(table.size), table.reshape(-1))
        rows, cols = np.unravel_index(cells, table.shape)
        return pd.DataFrame({"a": rows.astype(int), "b": cols.astype(int)})
    spec = case["contributions"]
    value, count = spec["default"]
    cells = {(i, j): [float(value)] * count for i in range(2) for j in range(2)}
    for key, parts in spec.items():
        if key != "default":
            i, j = map(int, key.split(","))
            listed, (filler, times) = parts
            cells[(i, j)] = [float(x) for x in listed] + [float(filler)] * times
    records = [(i, j, v) for (i, j), values in cells.items() for v in values]
    return pd.DataFrame(records, columns=["a", "b", "v"])


def main() -> None:
    logging.disable(logging.CRITICAL)
    from acro import ACRO

    cases = json.load(open(sys.argv[1]))["cases"]
    out = {}
    for case in cases:
        acro = ACRO(suppress=False)
        for key, value in case.get("rules", {}).items():
            acro.config[key] = value
            acro.sdc_checks.risk_appetite[key] = value
        if "df_resid" in case:
            n = int(case["df_resid"]) + 3
            rng = np.random.default_rng(n)
            x = pd.DataFrame({"const": 1.0, "x0": rng.normal(size=n), "x1": rng.normal(size=n)})
            acro.ols(rng.normal(size=n), x)
        else:
            data = micro(case)
            if "v" in data:
                acro.crosstab(data.a, data.b, values=data.v, aggfunc=case["statistic"])
            else:
                acro.crosstab(data.a, data.b)
        record = acro.results.get_index(0)
        cells = {k: v for k, v in (record.sdc.get("cells") or {}).items() if v}
        out[case["name"]] = {"status": record.status, "cells": cells, "summary": record.summary}
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
