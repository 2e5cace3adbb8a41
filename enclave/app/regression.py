"""Regression in the app: linear (OLS), logistic (logit) and probit models of one outcome on chosen predictors.

The estimators are statsmodels' (sm.OLS, sm.Logit, sm.Probit), given arrays, never formulas over strings. The design
matrix is built here from the release's integer codes: an intercept, a 0/1 column per non-reference value of each
categorical predictor (one-hot by indexing with the codes, no loop over records), and a numeric predictor's values
(`numbers[codes]`). Generalized values (intervals such as "30-39", groups, "*") are categories like any other.

Everything a model cannot be fitted on is a RegressionError with a message the page and the API (422) show, found
before fitting where it can be named (unknown attribute or value, an outcome that is not binary for logit/probit,
fewer records than parameters, a category whose records all have the same outcome, collinear terms) and caught from
statsmodels where it cannot (no convergence, a singular information matrix). Records whose outcome is unknown ("*"
or missing) or whose numeric predictor is missing are left out and counted.
"""
from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .analyses import CohortSpec
from .descriptive import label_numbers
from .table import MISSING, SUPPRESSED, CodedTable, FilterError

MODELS = {"ols": "linear regression (OLS)", "logit": "logistic regression (logit)", "probit": "probit regression"}
MAX_PREDICTORS = 20
MAX_PARAMETERS = 500  # columns of the design matrix: every category of every predictor, and the intercept
MAX_ITERATIONS = 100
LARGE_DESIGN = 4_000_000  # cells of X from which the memory freed after a fit is returned to the system at once
SINGULAR_TOLERANCE = 1e-10  # on the pivots of the scaled X'X (about 1e-5 on X itself)


class RegressionError(FilterError):
    """A model that cannot be fitted, with the reason (HTTP 422 / a message on the page, never a 500)."""


@dataclass
class Predictor:
    attribute: str
    reference: str | None = None  # None: the first value (in the release's natural order) present in the sample
    categorical: bool | None = None  # None: numeric attributes as numbers, every other as categories


@dataclass
class RegressionSpec:
    model: str
    outcome: str
    predictors: list[Predictor] = field(default_factory=list)
    event: str | None = None  # the outcome value coded 1 (binary outcomes); None: the second value present
    confidence: float = 0.95


@dataclass
class Design:
    """What the model is fitted on: outcome y, design matrix X (intercept first) and what each column means."""

    y: np.ndarray
    X: np.ndarray
    terms: list[dict]
    outcome: dict
    dropped: dict[str, int]
    references: dict[str, str]


def _finite(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else None


def _numbers(table: CodedTable, name: str, quasi_identifiers: set[str]) -> np.ndarray | None:
    return None if name in quasi_identifiers else label_numbers(table.columns[name])


def build_design(table: CodedTable, spec: RegressionSpec, cohort: CohortSpec,
                 quasi_identifiers: Iterable[str]) -> Design:
    """The outcome vector and design matrix of `spec` on the cohort (RegressionError naming what is wrong)."""
    qis = set(quasi_identifiers)
    if spec.model not in MODELS:
        raise RegressionError(f"unknown model {spec.model!r} (one of {', '.join(MODELS)})")
    if not spec.predictors:
        raise RegressionError("choose at least one predictor")
    if len(spec.predictors) > MAX_PREDICTORS:
        raise RegressionError(f"at most {MAX_PREDICTORS} predictors")
    names = [p.attribute for p in spec.predictors]
    for name in [spec.outcome, *names]:
        table.column(name)  # FilterError on an unknown attribute
    if spec.outcome in names:
        raise RegressionError(f"the outcome {spec.outcome!r} cannot also be a predictor")
    if len(set(names)) != len(names):
        raise RegressionError("each predictor can be chosen once")
    if not 0.5 <= spec.confidence < 1:
        raise RegressionError("the confidence level must be at least 0.5 and below 1")

    keep = table.mask(cohort.filters, cohort.exclude_suppressed)
    in_cohort = int(np.count_nonzero(keep))
    dropped: dict[str, int] = {}
    y_column = table.column(spec.outcome)
    unknown = np.array([label in (SUPPRESSED, MISSING) for label in y_column.labels], dtype=bool)
    if unknown.any():
        bad = np.take(unknown, y_column.codes) & keep
        if bad.any():
            dropped[f"{spec.outcome} unknown (“*” or missing)"] = int(bad.sum())
            keep &= ~bad
    numeric: dict[str, np.ndarray] = {}
    for p in spec.predictors:
        numbers = _numbers(table, p.attribute, qis)
        if numbers is None and p.categorical is False:
            raise RegressionError(f"{p.attribute!r} is not numeric: it can only be a categorical predictor")
        if numbers is not None and p.categorical is not True:
            numeric[p.attribute] = numbers
            missing = np.isnan(numbers)
            if missing.any():
                bad = np.take(missing, table.columns[p.attribute].codes) & keep
                if bad.any():
                    dropped[f"{p.attribute} missing"] = int(bad.sum())
                    keep &= ~bad
    rows = np.flatnonzero(keep)
    n = int(rows.size)
    if n == 0:
        raise RegressionError(f"no records to fit the model on (the cohort holds {in_cohort} records"
                              + (f"; left out: {_dropped_text(dropped)}" if dropped else "") + ")")

    y, outcome = _outcome(table, spec, rows, qis)

    # Columns: intercept, then per predictor its dummies (or its values).
    plan: list[tuple[str, np.ndarray, np.ndarray | None]] = []  # (attribute, codes of the sample, lookup or None)
    terms: list[dict] = [{"term": "(intercept)", "attribute": None, "level": None}]
    references: dict[str, str] = {}
    width = 1
    for p in spec.predictors:
        column = table.columns[p.attribute]
        codes = column.codes[rows]
        if p.attribute in numeric:
            plan.append((p.attribute, codes, None))
            terms.append({"term": p.attribute, "attribute": p.attribute, "level": None})
            width += 1
            if p.reference:
                raise RegressionError(f"{p.attribute!r} is used as a number: a reference value applies only to a "
                                      "categorical predictor (tick “as categories”)")
            continue
        present = np.bincount(codes, minlength=len(column.labels)) > 0
        if np.count_nonzero(present) < 2:
            raise RegressionError(f"the predictor {p.attribute!r} has a single value in the model's sample "
                                  f"({column.labels[int(np.argmax(present))]!r}): nothing to estimate; drop it or "
                                  "widen the cohort")
        if p.reference:
            ref = column.index_of(p.reference)
            if not present[ref]:
                raise RegressionError(f"the reference value {p.reference!r} of {p.attribute!r} has no records in "
                                      "the model's sample: choose another")
        else:
            ref = int(np.argmax(present))
        references[p.attribute] = column.labels[ref]
        lookup = np.full(len(column.labels), -1, dtype=np.int64)
        levels = [i for i in np.flatnonzero(present) if i != ref]
        lookup[levels] = width + np.arange(len(levels))
        plan.append((p.attribute, codes, lookup))
        terms += [{"term": f"{p.attribute} = {column.labels[i]}", "attribute": p.attribute,
                   "level": column.labels[i]} for i in levels]
        width += len(levels)
        if width > MAX_PARAMETERS:
            raise RegressionError(f"the model would have more than {MAX_PARAMETERS} parameters: choose predictors "
                                  "with fewer values")
    if n <= width:
        raise RegressionError(f"too few records: {n} in the model's sample for {width} parameters (the intercept "
                              f"and one per non-reference category or numeric predictor); a model needs more records "
                              "than parameters")
    X = np.zeros((n, width), dtype=np.float64)
    X[:, 0] = 1.0
    sample = np.arange(n)
    for (name, codes, lookup), term_index in zip(plan, _first_terms(terms, plan)):
        if lookup is None:
            X[:, term_index] = numeric[name][codes]  # a constant one is collinear with the intercept (rank check)
        else:
            target = lookup[codes]
            hit = target >= 0
            X[sample[hit], target[hit]] = 1.0
    return Design(y, X, terms, outcome, dropped, references)


def _first_terms(terms: list[dict], plan: Sequence[tuple]) -> list[int]:
    """Index of the column of each numeric predictor in `plan` (categorical ones use their lookup instead)."""
    positions = {t["attribute"]: i for i, t in enumerate(terms) if t["attribute"] and t["level"] is None}
    return [positions.get(name, -1) for name, _, _ in plan]


def _dropped_text(dropped: dict[str, int]) -> str:
    return ", ".join(f"{count} with {reason}" for reason, count in dropped.items())


def _outcome(table: CodedTable, spec: RegressionSpec, rows: np.ndarray, qis: set[str]) -> tuple[np.ndarray, dict]:
    """The outcome vector: a numeric outcome's values for OLS, else 1 for the event value and 0 for the other (the
    outcome must have exactly two values in the sample)."""
    column = table.columns[spec.outcome]
    codes = column.codes[rows]
    numbers = _numbers(table, spec.outcome, qis)
    if spec.model == "ols" and numbers is not None and spec.event is None:
        return numbers[codes], {"attribute": spec.outcome, "kind": "numeric"}
    present = np.flatnonzero(np.bincount(codes, minlength=len(column.labels)))
    labels = [column.labels[i] for i in present]
    if len(present) != 2:
        shown = ", ".join(repr(label) for label in labels[:6]) + (", …" if len(labels) > 6 else "")
        need = ("a numeric outcome, or a binary one" if spec.model == "ols" else
                f"{MODELS[spec.model]} needs a binary outcome")
        raise RegressionError(f"the outcome {spec.outcome!r} has {len(present)} value(s) in the model's sample "
                              f"({shown}): {need} with exactly two values (narrow the cohort or choose another "
                              "outcome)")
    if spec.event is None:
        event = int(present[1])
    else:
        event = column.index_of(spec.event)
        if event not in present:
            raise RegressionError(f"the event {spec.event!r} is not one of the outcome's values in the model's "
                                  f"sample ({labels[0]!r}, {labels[1]!r})")
    other = int(present[0] if present[1] == event else present[1])
    y = (codes == event).astype(np.float64)
    return y, {"attribute": spec.outcome, "kind": "binary", "event": column.labels[event],
               "other": column.labels[other], "events": int(y.sum())}


def _check_separation(design: Design, spec: RegressionSpec) -> None:
    """A category whose records all have the same outcome sends its coefficient to ±infinity (quasi-complete
    separation): name it instead of letting the fit diverge. Per category, events are counted by np.bincount."""
    y = design.y
    for i, term in enumerate(design.terms):
        if term["level"] is None:
            continue
        column = design.X[:, i] > 0
        size = int(np.count_nonzero(column))
        events = int(y[column].sum())
        if events in (0, size):
            value = design.outcome["event"] if events else design.outcome["other"]
            raise RegressionError(
                f"perfect separation: every one of the {size} records with {term['term']} has {spec.outcome} = "
                f"{value!r}, so its coefficient is infinite; leave that value out of the cohort, merge it (a coarser "
                "release), or drop the predictor")
    if design.references:
        for name, label in design.references.items():
            terms = [i for i, t in enumerate(design.terms) if t["attribute"] == name and t["level"] is not None]
            ref_rows = ~design.X[:, terms].any(axis=1) if terms else np.ones(y.size, dtype=bool)
            size = int(np.count_nonzero(ref_rows))
            events = int(y[ref_rows].sum())
            if events in (0, size):
                value = design.outcome["event"] if events else design.outcome["other"]
                raise RegressionError(
                    f"perfect separation: every one of the {size} records with {name} = {label!r} (the reference "
                    f"value) has {spec.outcome} = {value!r}; choose another reference value or leave it out")


def _check_rank(design: Design) -> None:
    """Collinear columns (a category that coincides with another predictor's, such as the suppressed records' "*"
    in two attributes, or a numeric predictor constant in the sample) make X'X singular: name them. X'X is k × k;
    scaled to unit diagonal, its pivoted QR shows which columns add nothing."""
    from scipy.linalg import qr

    X = design.X
    with np.errstate(over="ignore", invalid="ignore"):
        gram = X.T @ X
    if not np.isfinite(gram).all():
        raise RegressionError("a numeric predictor's values are too large to fit a model on (their squares "
                              "overflow): choose another predictor")
    scale = np.sqrt(np.diag(gram))
    zero = np.flatnonzero(scale == 0)
    if zero.size:
        raise RegressionError("singular design: " + ", ".join(design.terms[i]["term"] for i in zero)
                              + " is zero for every record of the sample")
    scaled = gram / np.outer(scale, scale)
    _, r, pivots = qr(scaled, pivoting=True)
    diagonal = np.abs(np.diag(r))
    rank = int(np.count_nonzero(diagonal > SINGULAR_TOLERANCE * diagonal[0]))
    if rank < X.shape[1]:
        names = ", ".join(design.terms[i]["term"] for i in sorted(pivots[rank:]))
        raise RegressionError(f"singular design (collinear predictors): {names} can be written from the other terms "
                              "in this sample (for example the suppressed records' “*” in two attributes: leave out "
                              "suppressed records, or drop a predictor)")


def null_log_likelihood(y: np.ndarray) -> float:
    """The log-likelihood of the intercept-only binary model, whose fitted probability is the share of events
    whatever the link (logit or probit): statsmodels would fit that model again, with a slow derivative-free
    optimizer, for the pseudo R² and the likelihood-ratio test."""
    n = y.size
    events = float(y.sum())
    share = events / n
    return float(events * math.log(share) + (n - events) * math.log1p(-share))


def fit(table: CodedTable, spec: RegressionSpec, cohort: CohortSpec, quasi_identifiers: Iterable[str]) -> dict:
    """Fit the model with statsmodels and return coefficients, standard errors, confidence intervals, p-values and
    the fit figures as plain numbers (RegressionError for any model that cannot be fitted)."""
    started = time.perf_counter()
    import scipy.linalg  # noqa: F401 (loads scipy's OpenBLAS, so that single_threaded() sets it too)

    from .blas import single_threaded

    single_threaded()
    design = build_design(table, spec, cohort, quasi_identifiers)
    if spec.model != "ols":
        _check_separation(design, spec)
    _check_rank(design)
    import statsmodels.api as sm  # imported on the first regression: the app's other pages do not pay for it
    from statsmodels.tools import sm_exceptions

    alpha = 1 - spec.confidence
    model = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow in exp() on the way to a non-convergence
        for category in (sm_exceptions.ConvergenceWarning, sm_exceptions.HessianInversionWarning,
                         sm_exceptions.PerfectSeparationWarning):
            warnings.simplefilter("error", category)
        try:
            if spec.model == "ols":
                result = sm.OLS(design.y, design.X).fit()
            else:
                # The rank was checked above on X'X; statsmodels would check it again by an SVD of all of X.
                model = (sm.Logit if spec.model == "logit" else sm.Probit)(design.y, design.X, check_rank=False)
                result = model.fit(disp=0, maxiter=MAX_ITERATIONS, method="newton")
                if not result.mle_retvals.get("converged", False):
                    raise RegressionError(f"the {MODELS[spec.model]} did not converge within {MAX_ITERATIONS} "
                                          "iterations (often a predictor that nearly separates the outcome): "
                                          "drop or merge predictors, or narrow the cohort")
                result.set_null_options(llnull=null_log_likelihood(design.y))
            params = np.asarray(result.params)
            errors = np.asarray(result.bse)
            statistics = np.asarray(result.tvalues)
            pvalues = np.asarray(result.pvalues)
            intervals = np.asarray(result.conf_int(alpha=alpha))
        except sm_exceptions.PerfectSeparationWarning:
            raise RegressionError("perfect separation: the predictors predict the outcome exactly, so the "
                                  "coefficients are infinite; drop or merge predictors") from None
        except (sm_exceptions.ConvergenceWarning, sm_exceptions.HessianInversionWarning) as exc:
            raise RegressionError(f"the {MODELS[spec.model]} could not be fitted ({exc}); drop or merge predictors, "
                                  "or narrow the cohort") from None
        except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError) as exc:
            raise RegressionError(f"the {MODELS[spec.model]} could not be fitted: {exc}") from None
    if not (np.isfinite(params).all() and np.isfinite(errors).all()):
        raise RegressionError(f"the {MODELS[spec.model]} has no finite standard errors (a singular information "
                              "matrix: predictors that separate the outcome or are collinear); drop or merge "
                              "predictors")
    stat_name = "t" if spec.model == "ols" else "z"
    coefficients = []
    for i, term in enumerate(design.terms):
        row = {**term, "coef": float(params[i]), "se": float(errors[i]), "statistic": _finite(statistics[i]),
               "p_value": _finite(pvalues[i]), "ci_low": float(intervals[i, 0]), "ci_high": float(intervals[i, 1])}
        if spec.model == "logit":
            row["odds_ratio"] = _finite(np.exp(params[i])) if params[i] < 700 else None
        coefficients.append(row)
    if spec.model == "ols":
        fit_figures = {"r_squared": _finite(result.rsquared), "adj_r_squared": _finite(result.rsquared_adj),
                       "f_statistic": _finite(result.fvalue), "f_p_value": _finite(result.f_pvalue)}
    else:
        fit_figures = {"pseudo_r_squared": _finite(result.prsquared), "llnull": _finite(result.llnull),
                       "llr": _finite(result.llr), "llr_p_value": _finite(result.llr_pvalue),
                       "iterations": int(result.mle_retvals.get("iterations", 0)), "converged": True}
    fit_figures.update({"log_likelihood": _finite(result.llf), "aic": _finite(result.aic),
                        "bic": _finite(result.bic)})
    answer = {
        "model": spec.model, "model_name": MODELS[spec.model], "outcome": design.outcome,
        "predictors": [p.attribute for p in spec.predictors], "references": design.references,
        "n": int(result.nobs), "df_model": int(round(result.df_model)), "df_resid": int(round(result.df_resid)),
        "parameters": len(design.terms), "dropped": [{"reason": k, "records": v} for k, v in design.dropped.items()],
        "confidence": spec.confidence, "statistic": stat_name, "coefficients": coefficients, "fit": fit_figures,
        "cohort": cohort.describe(), "seconds": round(time.perf_counter() - started, 4),
    }
    large = design.X.size >= LARGE_DESIGN
    del design, result, model
    if large:  # hand a million-record design's memory (and statsmodels' copies of it) back to the system
        from .context import release_freed_memory

        release_freed_memory()
    return answer
