"""Outputs in the app: `POST /api/outputs` and friends (the contract the airlock and checkers' scripts rely on), the
outputs page, and the "Save as output" forms of every analysis page.

An output is made from an analysis kind and that analysis's JSON query, exactly as its own endpoint takes it (the
same pydantic model validates it), optionally with a remedy. The page forms post the page's query string instead;
`query_from_params` turns it into the same JSON query, so both paths make the same output. Forms are same-origin
POSTs like the save-analysis form (SecurityMiddleware refuses others) and every page keeps the strict CSP: no
inline script, no inline style; a failing cell is marked by a class and its reason is text in the cell.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from outputs import checks as sdc
from outputs.acro_results import acro_record

from . import api
from .context import AppContext
from .output_checks import OUTPUT_KINDS, Built, OutputError, apply_remedy, build, cohort_record, differencing
from .pages import env
from .output_store import MAX_COMMENTS, OutputStoreError, clean_name, clean_text, now
from .table import FilterError

router = APIRouter(prefix="/api", tags=["outputs"])
page_router = APIRouter(include_in_schema=False)

QUERY_MODELS: dict[str, type[BaseModel]] = {
    "cohort": api.Cohort, "frequencies": api.FrequencyQuery, "crosstab": api.CrosstabQuery,
    "compare": api.CompareQuery, "descriptive": api.DescriptiveQuery, "histogram": api.HistogramQuery,
    "regression": api.RegressionQuery,
}
REMEDY_NAMES = {"suppress": "suppressed", "round": "rounded", "opensafely": "OpenSAFELY profile"}


class Remedy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["suppress", "round", "opensafely"]
    base: int | None = Field(None, ge=1, le=1_000_000, description="rounding base (default: the rules' "
                                                                   "safe_round_base, 5)")


class OutputRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=120)]
    kind: Literal["cohort", "frequencies", "crosstab", "compare", "descriptive", "histogram", "regression"]
    query: dict[str, Any] = Field(description="the analysis's JSON query, exactly as its own endpoint takes it")
    remedy: Remedy | None = None


class TextRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Annotated[str, Field(min_length=1, max_length=4000)]


class RemedyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    remedy: Remedy
    name: Annotated[str, Field(max_length=120)] | None = None


def ctx(request: Request) -> AppContext:
    return request.app.state.ctx


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "query"
    return f"query.{where}: {first['msg']}"


def parse_query(kind: str, query: dict) -> BaseModel:
    model = QUERY_MODELS.get(kind)
    if model is None:
        raise OutputError(f"unknown kind of output {kind!r} (one of {', '.join(OUTPUT_KINDS)})")
    try:
        return model.model_validate(query)
    except ValidationError as exc:
        raise OutputError(_validation_message(exc)) from None


# ---------------------------------------------------------------------------------------------------------------
# Making an output

def seal_sha256(seal: dict) -> str:
    """The hash of the seal as verified (canonical JSON: sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(seal, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _flags(built: Built) -> list[dict]:
    out = []
    for i, check in enumerate(built.checks):
        if check.status == sdc.PASS and check.rule != "structural-zeros":
            continue
        for row, col in built.positions.get(i, []):
            out.append({"row": int(row), "col": int(col), "rule": check.rule, "status": check.status})
    return out


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    text = str(value)
    # A label read back by a spreadsheet must stay text, never a formula.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def data_csv(data: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    corner = data["row_axis"] + (f" \\ {data['col_axis']}" if data.get("col_axis") else "")
    totals = data.get("row_totals") is not None
    writer.writerow([_csv_cell(x) for x in [corner, *data["col_labels"], *(["total"] if totals else [])]])
    for i, label in enumerate(data["row_labels"]):
        row = [label, *data["cells"][i]] + ([data["row_totals"][i]] if totals else [])
        writer.writerow([_csv_cell(x) for x in row])
    if data.get("col_totals") is not None or data.get("total") is not None:
        col_totals = data.get("col_totals") or [None] * len(data["col_labels"])
        if data.get("col_axis") is None:
            col_totals = [data.get("total")]
        writer.writerow([_csv_cell(x) for x in ["total", *col_totals,
                                                *([data.get("total")] if totals else [])]])
    return buffer.getvalue()


def _check_dicts(built: Built) -> list[dict]:
    return [{"rule": c.rule, "status": c.status, "cells": [list(cell) for cell in c.cells], "reason": c.reason}
            for c in built.checks]


def make_output(context: AppContext, name: str, kind: str, query: dict, remedy: dict | None,
                remedied_from: int | None = None) -> dict:
    """Run, check, remedy (if asked) and store one output; OutputError / OutputStoreError with the reason. One at a
    time: the differencing check must see every output stored before this one."""
    with context.outputs.making:
        return _make_output(context, name, kind, query, remedy, remedied_from)


def _make_output(context: AppContext, name: str, kind: str, query: dict, remedy: dict | None,
                 remedied_from: int | None) -> dict:
    name = clean_name(name)
    parsed = parse_query(kind, query)
    rules = context.output_rules
    built = build(context, kind, parsed, rules)
    earlier = context.outputs.list()
    diff = differencing(context, built, earlier, rules)
    if diff is not None:
        built.checks.append(diff)
    unremedied = built.status
    if remedy is not None:
        built = apply_remedy(built, remedy, rules)
    status = sdc.combine([built.status] + ([sdc.REVIEW] if remedy is not None else []))
    manifest = context.manifest
    labels = [built.data["row_labels"]] + ([built.data["col_labels"]] if built.data.get("col_axis") else [])
    verdict = sdc.Verdict(tuple(built.checks), built.statistic, rules)
    record = {
        "name": name, "kind": kind, "status": status, "query": parsed.model_dump(mode="json"),
        "remedy": built.remedy, "remedied_from": remedied_from, "status_before_remedy":
            unremedied if remedy is not None else None,
        "checks": _check_dicts(built), "flags": _flags(built), "data": built.data,
        "cohorts": [cohort_record(c) for c in built.cohorts],
        "rules": rules.record(),
        "release": {"dataset": manifest.dataset, "id": context.release.release_id,
                    "data_sha256": manifest.data_sha256, "seal_sha256": seal_sha256(context.seal),
                    "manifest_sha256": context.seal.get("manifest_sha256")},
        "created_at": now(), "created_by": context.recipient,
        "comments": [], "exception": None,
    }
    rendering = render_rendering(record)

    def with_acro(saved: dict) -> None:
        saved["acro"] = acro_record(
            f"output_{saved['id']}", verdict, method=kind, files=["data.csv", "rendering.html"], status=status,
            labels=labels, properties={"query": saved["query"], "cohorts": saved["cohorts"],
                                       **({"dof": built.data["df_resid"]} if kind == "regression" else {})},
            command=f"POST /api/outputs kind={kind}", timestamp=saved["created_at"],
            exception="")
        if built.remedy is not None:
            saved["acro"]["properties"]["mitigation_actions"] = list(built.remedy["actions"])
            saved["acro"]["properties"]["mitigation"] = "suppress" if built.remedy["kind"] == "suppress" \
                else "round"

    return context.outputs.add(record, data_csv(built.data), rendering, with_acro)


def _cell(value: Any) -> str:
    """A cell of an output: whole numbers with thousands separators, others with 6 significant digits."""
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


env.filters["cell"] = _cell


def render_rendering(record: dict) -> str:
    return env.get_template("output_rendering.html").render(output=record, grid=grid(record))


def grid(record: dict) -> dict:
    """Per cell of `data`, its flags (rule, status, reason): the template marks and explains them."""
    reasons = {c["rule"]: c["reason"] for c in record.get("checks", [])}
    marks: dict[str, list[dict]] = {}
    for flag in record.get("flags", []):
        marks.setdefault(f"{flag['row']},{flag['col']}", []).append({**flag, "reason": reasons.get(flag["rule"], "")})
    worst = {key: sdc.combine(f["status"] for f in flags if f["rule"] != "structural-zeros")
             if any(f["rule"] != "structural-zeros" for f in flags) else "structural"
             for key, flags in marks.items()}
    return {"marks": marks, "worst": worst}


def public(record: dict) -> dict:
    """The record as the API returns it (everything stored; files are named, not served)."""
    return {**record, "url": f"/outputs/{record['id']}"}


def add_comment(context: AppContext, output_id: int, text: str) -> dict:
    text = clean_text(text, "comment")

    def change(record: dict) -> None:
        if len(record["comments"]) >= MAX_COMMENTS:
            raise OutputStoreError(f"an output takes at most {MAX_COMMENTS} comments", 409)
        record["comments"].append({"text": text, "at": now(), "by": context.recipient})
        record.setdefault("acro", {})["comments"] = [c["text"] for c in record["comments"]]

    return context.outputs.update(output_id, change)


def request_exception(context: AppContext, output_id: int, text: str) -> dict:
    text = clean_text(text, "justification")

    def change(record: dict) -> None:
        if record["status"] == sdc.PASS:
            raise OutputStoreError("an exception is requested for a fail or review output; this one passes", 409)
        record["exception"] = {"justification": text, "at": now(), "by": context.recipient}
        record.setdefault("acro", {})["exception"] = text

    return context.outputs.update(output_id, change)


def remedy_output(context: AppContext, output_id: int, remedy: dict, name: str | None = None) -> dict:
    original = context.outputs.get(output_id)
    if original is None:
        raise OutputStoreError(f"no output {output_id}", 404)
    if original.get("remedy"):
        raise OutputStoreError("this output is already remedied: apply a remedy to the original", 409)
    label = REMEDY_NAMES.get(remedy.get("kind"), "remedied")
    new_name = name or f"{original['name']} ({label})"
    return make_output(context, new_name[:120], original["kind"], original["query"], remedy, original["id"])


def _answer(function, *args) -> dict:
    try:
        return function(*args)
    except (OutputError, OutputStoreError) as exc:
        raise HTTPException(status_code=getattr(exc, "status", 422), detail=str(exc)) from None
    except FilterError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None


# ---------------------------------------------------------------------------------------------------------------
# JSON API

@router.post("/outputs", summary="Save an analysis as an output, checked per cell by the output rules; optionally "
                                 "remedied (suppress, round, opensafely). Returns its record")
def post_output(body: OutputRequest, request: Request) -> dict:
    context = ctx(request)
    remedy = body.remedy.model_dump() if body.remedy else None
    return public(_answer(make_output, context, body.name, body.kind, body.query, remedy))


SUMMARY_FIELDS = ("id", "name", "kind", "status", "checks", "remedy", "remedied_from", "release", "created_at",
                  "created_by", "exception")


@router.get("/outputs", summary="The recipient's outputs, newest first: id, name, kind, status, checks, release, "
                                "when and by whom (GET /api/outputs/{id} for the data and everything else)")
def list_outputs(request: Request) -> list[dict]:
    return [{**{k: r.get(k) for k in SUMMARY_FIELDS}, "url": f"/outputs/{r['id']}"}
            for r in ctx(request).outputs.list()]


@router.get("/outputs/{output_id}", summary="One output: id, status, checks (rule, status, cells), data, metadata")
def get_output(output_id: str, request: Request) -> dict:
    record = ctx(request).outputs.get(output_id)
    if record is None:
        raise HTTPException(status_code=404, detail=f"no output {output_id}")
    return public(record)


@router.post("/outputs/{output_id}/comments", summary="Add a comment to an output")
def post_comment(output_id: str, body: TextRequest, request: Request) -> dict:
    return public(_answer(add_comment, ctx(request), output_id, body.text))


@router.post("/outputs/{output_id}/exception", summary="Request an exception for a fail or review output")
def post_exception(output_id: str, body: TextRequest, request: Request) -> dict:
    return public(_answer(request_exception, ctx(request), output_id, body.text))


@router.post("/outputs/{output_id}/remedy", summary="A new output: this one's analysis with a remedy applied")
def post_remedy(output_id: str, body: RemedyRequest, request: Request) -> dict:
    return public(_answer(remedy_output, ctx(request), output_id, body.remedy.model_dump(), body.name))


# ---------------------------------------------------------------------------------------------------------------
# Pages and forms

def _listify(params: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in params if k == key]


def _cohort_json(context: AppContext, params, key: str = "where", exclude: str = "xs") -> dict:
    spec = context.cohort_from(params, key, exclude)
    return {"filters": spec.filters, "exclude_suppressed": spec.exclude_suppressed}


def query_from_params(context: AppContext, kind: str, params: list[tuple[str, str]]) -> dict:
    """A page's query string as its analysis's JSON query (what `POST /api/<kind>` takes)."""
    first = {}
    for k, v in params:
        first.setdefault(k, v)
    names = context.table.names
    if kind == "cohort":
        return _cohort_json(context, params)
    if kind == "frequencies":
        return {"attribute": first.get("attr") or names[0], **_cohort_json(context, params)}
    if kind == "crosstab":
        return {"row": first.get("row") or names[0], "col": first.get("col") or names[min(1, len(names) - 1)],
                **_cohort_json(context, params)}
    if kind == "compare":
        return {"attribute": first.get("attr") or names[0], "a": _cohort_json(context, params, "a", "xa"),
                "b": _cohort_json(context, params, "b", "xb")}
    if kind == "descriptive":
        return {"attribute": first.get("attr", ""), "group": first.get("by") or None, **_cohort_json(context, params)}
    if kind == "histogram":
        bins = (first.get("bins") or "").strip()
        return {"attribute": first.get("attr") or names[0], "bins": int(bins) if bins.isdecimal() else None,
                **_cohort_json(context, params)}
    if kind == "regression":
        from .pages import regression_from

        spec = regression_from(params)
        return {"model": spec.model, "outcome": spec.outcome, "event": spec.event, "confidence": spec.confidence,
                "predictors": [{"attribute": p.attribute, "reference": p.reference, "categorical": p.categorical}
                               for p in spec.predictors], **_cohort_json(context, params)}
    raise OutputError(f"unknown kind of output {kind!r}")


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True, max_num_fields=20))


def _render(request: Request, template: str, title: str, status: int = 200, **values) -> HTMLResponse:
    from .pages import render

    return render(request, template, title, status=status, **values)


def _list_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
    context = ctx(request)
    return _render(request, "outputs.html", "outputs", status=status, items=context.outputs.list(), error=error,
                   rules=context.output_rules.record())


@page_router.get("/outputs", response_class=HTMLResponse)
def outputs_page(request: Request) -> HTMLResponse:
    return _list_page(request)


@page_router.post("/outputs")
async def save_from_page(request: Request) -> Response:
    context = ctx(request)
    form = await _form(request)
    kind = form.get("kind", "")
    try:
        if kind not in QUERY_MODELS:
            raise OutputError(f"unknown kind of output {kind!r}")
        params = parse_qsl(form.get("params", ""), keep_blank_values=True, max_num_fields=400)
        query = query_from_params(context, kind, params)
        record = make_output(context, form.get("name", ""), kind, query, None)
    except (OutputError, OutputStoreError, FilterError, ValueError) as exc:
        return _list_page(request, getattr(exc, "status", 422), str(exc))
    return RedirectResponse(f"/outputs/{record['id']}", status_code=303)


@page_router.get("/outputs/{output_id}", response_class=HTMLResponse)
def output_page(output_id: str, request: Request) -> HTMLResponse:
    record = ctx(request).outputs.get(output_id)
    if record is None:
        return _render(request, "error.html", "not found", status=404, message=f"There is no output {output_id}.")
    return _render(request, "output.html", f"output {record['id']}", output=record, grid=grid(record),
                   message=request.query_params.get("message"), release_request=_release_request(request, record))


def _release_request(request: Request, record: dict) -> dict | None:
    """For the output page's "request its release" box: the open request of the served release (its number,
    whether it holds this output, whether it can take it), or None when there is none yet."""
    from .airlock_routes import drafts

    if (record.get("release") or {}).get("id") != ctx(request).release.release_id:
        return {"other_release": True}
    store = drafts(request)
    open_numbers = store.open_for_release()
    if not open_numbers:
        return None
    view = store.get(open_numbers[0])
    if view is None:
        return None
    return {"number": view["number"], "state": view["state"], "editable": view["editable"],
            "holds": any(item["output_id"] == record["id"] for item in view["outputs"])}


@page_router.post("/outputs/{output_id}/{action}")
async def output_action(output_id: str, action: str, request: Request) -> Response:
    context = ctx(request)
    form = await _form(request)
    try:
        if action == "comment":
            add_comment(context, output_id, form.get("text", ""))
            target = f"/outputs/{output_id}?message=comment"
        elif action == "exception":
            request_exception(context, output_id, form.get("text", ""))
            target = f"/outputs/{output_id}?message=exception"
        elif action == "remedy":
            kind = form.get("remedy", "")
            if kind not in REMEDY_NAMES:
                raise OutputError(f"unknown remedy {kind!r}")
            record = remedy_output(context, output_id, {"kind": kind, "base": None})
            target = f"/outputs/{record['id']}?message=remedied"
        else:
            return _render(request, "error.html", "not found", status=404, message="There is no such action.")
    except (OutputError, OutputStoreError, FilterError) as exc:
        record = context.outputs.get(output_id)
        status = getattr(exc, "status", 422)
        if record is None:
            return _render(request, "error.html", "not found", status=404, message=str(exc))
        return _render(request, "output.html", f"output {record['id']}", status=status, output=record,
                       grid=grid(record), error=str(exc), message=None)
    return RedirectResponse(target, status_code=303)


__all__ = ["make_output", "page_router", "query_from_params", "router"]
