"""Typed columns (Stata, SAS, Excel, a database, a DataFrame) as the text the engine works on.

The engine compares values with hierarchy labels character for character, and a CSV file gives them as written. A
typed reader gives numbers, so they are written back the way a CSV export writes them: a whole number without a
decimal point (SAS and Excel store every number as a float, so age 39 is 39.0 there and must still match the
hierarchy's "39"), other numbers in Python's shortest round-trip form, a labelled value as its label (Stata's value
labels), a date without a time of midnight, and a missing value (NaN, NULL, NaT) as the empty text, as an empty CSV
field reads.
"""
from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pandas as pd

# Whole floats up to 2**53 are exact integers; beyond that the float's own text is kept.
_EXACT = float(2 ** 53)


def text_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column of `frame` as text (see the module), the index dropped (it may be an identifier and is never
    released); the caller's frame is not changed."""
    return pd.DataFrame({name: column_text(frame[name]) for name in frame.columns}, columns=list(frame.columns),
                        dtype=object).reset_index(drop=True)


def column_text(series: pd.Series) -> np.ndarray:
    """One column as an object array of str."""
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        labels = column_text(pd.Series(series.cat.categories))
        codes = series.cat.codes.to_numpy()
        return np.where(codes >= 0, labels[np.maximum(codes, 0)], "").astype(object)
    if pd.api.types.is_bool_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype):
        missing = series.isna().to_numpy()
        values = series.to_numpy(dtype=object)
        return np.array(["" if m else str(bool(v)) for v, m in zip(values, missing)], dtype=object)
    if pd.api.types.is_integer_dtype(dtype):
        missing = series.isna().to_numpy()
        values = series.to_numpy(dtype=object)
        return np.array(["" if m else str(int(v)) for v, m in zip(values, missing)], dtype=object)
    if pd.api.types.is_float_dtype(dtype):
        return _float_text(series.to_numpy(dtype=np.float64, na_value=np.nan))
    if pd.api.types.is_datetime64_any_dtype(dtype):
        stamps = pd.DatetimeIndex(series)
        midnight = bool(((stamps.hour == 0) & (stamps.minute == 0) & (stamps.second == 0) & (stamps.microsecond == 0)
                         & (stamps.nanosecond == 0))[~stamps.isna()].all())
        text = stamps.strftime("%Y-%m-%d" if midnight else "%Y-%m-%d %H:%M:%S.%f").to_numpy(dtype=object)
        if not midnight:
            text = np.array([t if t is None or not t.endswith(".000000") else t[:-7] for t in text], dtype=object)
        return np.where(stamps.isna(), "", text).astype(object)
    values = series.to_numpy(dtype=object)
    if pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):   # text already: only blank the NAs
        missing = series.isna().to_numpy()
        if missing.any():
            values = values.copy()
            values[missing] = ""
        return values
    return np.array([value_text(v) for v in values], dtype=object)


def value_text(value: object) -> str:
    """One value of an object column (text, a database's Decimal or date, bytes) as text."""
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(_float_text(np.array([float(value)]))[0])
    if isinstance(value, decimal.Decimal):
        return "" if value.is_nan() else str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ") if value.time() != dt.time(0) or value.tzinfo else value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _float_text(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    finite = np.isfinite(values)
    whole = finite & (np.abs(values) < _EXACT) & (values == np.round(values))
    out[whole] = values[whole].astype(np.int64).astype(str)
    rest = finite & ~whole
    out[rest] = [repr(float(v)) for v in values[rest]]
    out[np.isnan(values)] = ""
    out[np.isinf(values)] = np.where(values[np.isinf(values)] > 0, "inf", "-inf")
    return out


__all__ = ["column_text", "text_frame", "value_text"]
