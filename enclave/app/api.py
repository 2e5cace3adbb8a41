"""The JSON API: analysis queries (POST with a JSON body), release description and saved analyses.

The cohort builder's live count calls POST /api/count on every change. Only aggregates ever leave the table: there is
no endpoint that returns records. Bodies are validated by pydantic models that forbid unknown fields and bound sizes;
an unknown attribute or value answers 422 with the reason.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from . import analyses, descriptive, regression
from .analyses import CohortSpec
from .context import PAGE_PARAMS, AppContext
from .table import FilterError
from .workspace import WorkspaceError

router = APIRouter(prefix="/api", tags=["analyses"])

Name = Annotated[str, Field(max_length=200)]
FilterMap = Annotated[dict[Name, Annotated[list[Annotated[str, Field(max_length=500)]], Field(max_length=2000)]],
                      Field(max_length=500)]


class Cohort(BaseModel):
    """Selected values per attribute: a record matches when, for every attribute listed, it has one of them."""

    model_config = ConfigDict(extra="forbid")
    filters: FilterMap = Field(default_factory=dict, examples=[{"sex": ["Female"], "age": ["30-39", "40-49"]}])
    exclude_suppressed: bool = Field(False, description="leave out records whose every quasi-identifier is '*'")


class CountQuery(Cohort):
    facets: bool = Field(False, description="also count every attribute's values under the other filters")


class FrequencyQuery(Cohort):
    attribute: Name


class CrosstabQuery(Cohort):
    row: Name
    col: Name


class CompareQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attribute: Name
    a: Cohort
    b: Cohort


class DescriptiveQuery(Cohort):
    attribute: Name = Field(description="a numeric attribute (not a quasi-identifier; every value a number)")
    group: Name | None = Field(None, description="statistics per value of this attribute (none: the cohort only)")


class HistogramQuery(Cohort):
    attribute: Name
    bins: int | None = Field(None, ge=1, le=descriptive.MAX_BINS,
                             description="equal-width bins of a numeric attribute (default: Sturges' number); "
                                         "other attributes get one bar per value")


class PredictorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attribute: Name
    reference: Annotated[str, Field(max_length=500)] | None = Field(
        None, description="the category left out (its coefficient is 0); default the first value in the sample")
    categorical: bool | None = Field(None, description="dummy-code a numeric attribute (default: numeric ones as "
                                                       "numbers, every other attribute as categories)")


class RegressionQuery(Cohort):
    model: Literal["ols", "logit", "probit"]
    outcome: Name
    event: Annotated[str, Field(max_length=500)] | None = Field(
        None, description="the outcome value coded 1 for a binary outcome (default: the second value in the sample)")
    predictors: Annotated[list[PredictorSpec], Field(min_length=1, max_length=regression.MAX_PREDICTORS)]
    confidence: float = Field(0.95, ge=0.5, lt=1, description="level of the confidence intervals")


class Stats(BaseModel):
    group: str
    count: int
    mean: float | None
    sd: float | None = Field(description="sample standard deviation (n - 1); none for fewer than two values")
    median: float | None
    min: float | None
    max: float | None
    sum: float | None = Field(description="none only beyond the range of floating-point numbers")


class DescriptiveResult(BaseModel):
    attribute: str
    group: str | None
    rows: list[Stats] = Field(description="one per value of the grouping attribute, empty ones included")
    total: Stats
    missing: int = Field(description="records of the cohort without a value (left out)")
    records: int
    cohort: str


class HistogramRow(BaseModel):
    label: str
    low: float | None
    high: float | None
    count: int
    percent: float


class HistogramResult(BaseModel):
    attribute: str
    kind: Literal["histogram", "bar"]
    rows: list[HistogramRow]
    total: int
    missing: int
    bins: int | None = None
    cohort: str


class Coefficient(BaseModel):
    term: str
    attribute: str | None
    level: str | None = Field(description="the category of a dummy; none for the intercept and numeric predictors")
    coef: float
    se: float
    statistic: float | None = Field(description="t (OLS) or z (logit, probit)")
    p_value: float | None
    ci_low: float
    ci_high: float
    odds_ratio: float | None = None


class Dropped(BaseModel):
    reason: str
    records: int


class RegressionResult(BaseModel):
    model: str
    model_name: str
    outcome: dict[str, Any]
    predictors: list[str]
    references: dict[str, str]
    n: int
    df_model: int
    df_resid: int
    parameters: int
    dropped: list[Dropped]
    confidence: float
    statistic: Literal["t", "z"]
    coefficients: list[Coefficient]
    fit: dict[str, float | int | bool | None] = Field(
        description="OLS: r_squared, adj_r_squared, f_statistic, f_p_value; logit/probit: pseudo_r_squared "
                    "(McFadden), llnull, llr, llr_p_value, iterations; all: log_likelihood, aic, bic")
    cohort: str
    seconds: float


class SaveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=120)]
    kind: Annotated[str, Field(max_length=20)]
    params: Annotated[list[Annotated[list[Annotated[str, Field(max_length=500)]], Field(min_length=2, max_length=2)]],
                      Field(max_length=400)] = Field(default_factory=list)


def ctx(request: Request) -> AppContext:
    return request.app.state.ctx


def _cohort(context: AppContext, query: Cohort) -> CohortSpec:
    return CohortSpec(analyses.clean_filters(context.table, query.filters), query.exclude_suppressed)


def _run(function, *args: Any) -> dict:
    try:
        return function(*args)
    except FilterError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None


@router.get("/release", summary="The release: manifest summary and every attribute's values with counts")
def release_info(request: Request) -> dict:
    context = ctx(request)
    manifest = context.manifest
    written = manifest.document()   # blocks as the manifest has them (absent ones as null)
    counts = {name: context.table.frequencies(name).tolist() for name in context.table.names}
    return {
        "dataset": context.dataset, "release": context.release.release_id,
        "data_sha256": manifest.data_sha256, "records": context.table.n,
        "suppressed_records": manifest.suppressed_records, "transformation": written.get("transformation"),
        "quality": written.get("quality"), "risk": written.get("risk"), "gate": written.get("gate"),
        "app": {"database": context.release.engine.dialect.name, "imported": context.release.imported,
                "import_seconds": round(context.release.import_seconds, 3),
                "startup_seconds": round(context.startup_seconds, 3), "memory_bytes": context.table.nbytes()},
        "attributes": [{"name": a["name"], "level": a["level"],
                        "values": [{"label": v["label"], "count": v["count"]} for v in a["values"]]}
                       for a in context.attributes(counts)],
    }


@router.post("/count", summary="Number of records in a cohort (the cohort builder's live count)")
def count(query: CountQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: analyses.cohort_count(context.table, _cohort(context, query), facets=query.facets))


@router.post("/frequencies", summary="Frequency table of one attribute in a cohort")
def frequencies(query: FrequencyQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: analyses.frequency_table(context.table, query.attribute, _cohort(context, query)))


@router.post("/crosstab", summary="Cross-tabulation of two attributes in a cohort, with row and column percentages")
def crosstab(query: CrosstabQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: analyses.cross_tabulation(context.table, query.row, query.col, _cohort(context, query)))


@router.post("/compare", summary="Two cohorts compared on one attribute, with a chi-square test")
def compare(query: CompareQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: analyses.compare_cohorts(context.table, query.attribute, _cohort(context, query.a),
                                                 _cohort(context, query.b)))


def regression_spec(query: RegressionQuery) -> regression.RegressionSpec:
    return regression.RegressionSpec(
        query.model, query.outcome,
        [regression.Predictor(p.attribute, p.reference, p.categorical) for p in query.predictors],
        query.event, query.confidence)


@router.post("/descriptive", response_model=DescriptiveResult,
             summary="Count, mean, standard deviation, median, min, max and sum of a numeric attribute by group")
def describe(query: DescriptiveQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: descriptive.describe(context.table, query.attribute, query.group, _cohort(context, query),
                                             context.quasi_identifiers()))


@router.post("/histogram", response_model=HistogramResult,
             summary="Histogram of a numeric attribute, or the count of each value of any other (a bar chart)")
def histogram(query: HistogramQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: descriptive.histogram(context.table, query.attribute, _cohort(context, query),
                                              context.quasi_identifiers(), query.bins))


@router.post("/regression", response_model=RegressionResult,
             summary="Linear (OLS), logistic or probit regression in a cohort; 422 with the reason when the model "
                     "cannot be fitted")
def fit_regression(query: RegressionQuery, request: Request) -> dict:
    context = ctx(request)
    return _run(lambda: regression.fit(context.table, regression_spec(query), _cohort(context, query),
                                       context.quasi_identifiers()))


@router.get("/analyses", summary="Saved analyses of this dataset")
def list_analyses(request: Request) -> list[dict]:
    context = ctx(request)
    return [saved.as_dict() for saved in context.workspace.list(context.dataset)]


@router.post("/analyses", summary="Save an analysis (its kind and page parameters; re-run when opened)")
def save_analysis(body: SaveRequest, request: Request) -> dict:
    context = ctx(request)
    allowed = PAGE_PARAMS.get(body.kind, frozenset())
    params = [(k, v) for k, v in body.params if k in allowed]
    try:
        saved = context.workspace.save(body.name, body.kind, params, context.dataset, context.release.release_id)
    except WorkspaceError as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from None
    return {**saved.as_dict(), "url": f"/analyses/{saved.id}"}


@router.get("/analyses/{analysis_id}", summary="One saved analysis")
def get_analysis(analysis_id: int, request: Request) -> dict:
    saved = ctx(request).workspace.get(analysis_id)
    if saved is None:
        raise HTTPException(status_code=404, detail=f"no saved analysis {analysis_id}")
    return saved.as_dict()
