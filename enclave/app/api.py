"""The JSON API: analysis queries (POST with a JSON body), release description and saved analyses.

The cohort builder's live count calls POST /api/count on every change. Only aggregates ever leave the table: there is
no endpoint that returns records. Bodies are validated by pydantic models that forbid unknown fields and bound sizes;
an unknown attribute or value answers 422 with the reason.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from . import analyses
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
