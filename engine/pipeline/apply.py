"""The apply step: a found transformation applied to every record of the input.

Each record is generalized to the transformation's levels and keeps exactly the suppression decision its class got
in the search (suppressed records show `*` for every quasi-identifier); identifying columns are dropped, the other
columns pass through unchanged. Used by the global run and by local recoding (engine.local) for each of its parts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..classes import Evaluation
from ..encoding import EncodedTable
from ..grouping import combined_key
from ..policy import DatasetPolicy

SUPPRESSED = "*"


def apply_transformation(policy: DatasetPolicy, frame: pd.DataFrame, table: EncodedTable, best: Evaluation
                         ) -> tuple[pd.DataFrame, np.ndarray]:
    """Generalize every record, blank out the quasi-identifiers of suppressed records, drop identifying columns."""
    codes = np.stack([a.to_level[level][a.records] for a, level in zip(table.attributes, best.levels)])
    cards = [a.cardinality(level) for a, level in zip(table.attributes, best.levels)]
    # Find each record's class among the search's classes, to reuse its suppression decision exactly.
    keys = combined_key(np.concatenate([best.codes, codes], axis=1), cards)
    class_keys, record_keys = keys[: best.codes.shape[1]], keys[best.codes.shape[1]:]
    order = np.argsort(class_keys, kind="stable")
    record_class = order[np.searchsorted(class_keys, record_keys, sorter=order)]
    if not np.array_equal(class_keys[record_class], record_keys):
        raise RuntimeError("internal error: a record's class is missing from the search result")
    record_suppressed = best.suppressed[record_class]
    out = pd.DataFrame(index=frame.index)
    for name, attribute in policy.attributes.items():
        if attribute.type == "identifying":
            continue
        if attribute.type == "quasi_identifying":
            encoded = next(a for a in table.attributes if a.name == name)
            level = best.levels[table.names.index(name)]
            values = encoded.labels[level][encoded.to_level[level][encoded.records]].astype(object)
            values[record_suppressed] = SUPPRESSED
            out[name] = values
        else:
            out[name] = frame[name].to_numpy()
    return out, record_suppressed


__all__ = ["SUPPRESSED", "apply_transformation"]
