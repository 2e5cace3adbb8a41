"""Statistical and spreadsheet files through pandas' readers: Stata (.dta), SAS (.sas7bdat, .xpt) and Excel (.xlsx).

Stata files carry value labels (1 -> "Male"): with `input.value_labels` (the default) a labelled column is read as
its labels, as Stata shows it, and the manifest lists those columns. SAS data files hold no value labels (SAS keeps
formats in a separate catalog), Excel cells hold what they show. Every column then becomes text
(engine.sources.text). As for CSV files (engine.table), an error never quotes the file's content: the reader's
message is replaced by its kind.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import InputError
from .text import text_frame


def read_typed_file(path: Path, fmt: str, spec, source: str | None) -> tuple[pd.DataFrame, list[str]]:
    """(the table as text, the columns read through value labels) from a Stata, SAS or Excel file."""
    try:
        if fmt == "stata":
            frame = pd.read_stata(path, convert_categoricals=spec.value_labels, convert_missing=False)
        elif fmt in ("sas7bdat", "xport"):
            explicit = "encoding" in spec.model_fields_set
            encoding = spec.encoding if explicit or fmt == "xport" else "infer"   # sas7bdat names its own
            frame = pd.read_sas(path, format=fmt, encoding=encoding)
        elif fmt == "excel":
            frame = _read_excel(path, spec, source)
        else:   # pragma: no cover - engine.table reads csv and parquet
            raise ValueError(fmt)
    except InputError:
        raise
    except Exception as exc:   # noqa: BLE001 - a malformed file fails deep in its reader (struct, zipfile, XML...)
        raise InputError(source, "input.path",
                         f"{path.name}: not a readable {_FORMAT_NAMES[fmt]} file ({_problem(exc)})") from None
    labelled = [str(name) for name in frame.columns if isinstance(frame[name].dtype, pd.CategoricalDtype)]
    return text_frame(frame), labelled


_FORMAT_NAMES = {"stata": "Stata (.dta)", "sas7bdat": "SAS (.sas7bdat)", "xport": "SAS transport (.xpt)",
                 "excel": "Excel (.xlsx)"}


def _read_excel(path: Path, spec, source: str | None) -> pd.DataFrame:
    try:
        import openpyxl  # noqa: F401 - pandas' .xlsx reader
    except ImportError:
        raise InputError(source, "input.format", "Excel files need openpyxl: pip install 'safeshare[formats]'") \
            from None
    sheet = 0 if spec.sheet is None else spec.sheet
    with pd.ExcelFile(path, engine="openpyxl") as book:
        if isinstance(sheet, str) and sheet not in book.sheet_names:
            raise InputError(source, "input.sheet", f"{path.name} has no sheet {sheet!r} (it has "
                                                    f"{len(book.sheet_names)})")
        if isinstance(sheet, int) and sheet >= len(book.sheet_names):
            raise InputError(source, "input.sheet", f"{path.name} has {len(book.sheet_names)} sheet(s); sheets are "
                                                    f"numbered from 0")
        return pd.read_excel(book, sheet_name=sheet, keep_default_na=False, na_values=[])


def _problem(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        return f"not {exc.encoding} text; give input.encoding"
    return type(exc).__name__


__all__ = ["read_typed_file"]
