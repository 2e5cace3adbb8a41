"""HTML pages, rendered on the server (Jinja2) so they work in the kiosk without relying on JavaScript.

Every page's <title> starts with "safeshare" (the kiosk watchdog's sign that the window shows the app). Analyses read
their parameters from the query string (GET forms), so a page can be saved as an analysis by saving its query
string, and re-opened by redirecting to it. Charts are inline SVG from `engine.svgcharts`. The only POST forms save and delete
saved analyses in the workspace; their bodies are parsed here (urlencoded) without an extra dependency.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from engine import svgcharts as charts

from . import analyses, descriptive, regression
from .charts import coefficient_chart
from .context import PAGE_PARAMS, AppContext
from .table import FilterError
from .workspace import WorkspaceError

TEMPLATES = Path(__file__).with_name("templates")
MAX_OPTIONS = 100  # values listed in the regression page's reference and event menus (a numeric attribute has more)
PCT_MODES = {"row": "row %", "col": "column %", "total": "% of total", "none": "counts only"}

router = APIRouter(include_in_schema=False)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt_int(value: object) -> str:
    return f"{int(value):,}" if _is_number(value) else "–"  # type: ignore[call-overload]


def _fmt_pct(value: object, digits: int = 1) -> str:
    return f"{float(value):.{digits}f}%" if _is_number(value) else "–"  # type: ignore[arg-type]


def _fmt_num(value: object, digits: int = 4) -> str:
    """Numbers of very different magnitudes (ratios near 0, population sizes) readable at a glance."""
    if not _is_number(value):
        return "–"
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        return str(number)
    if number != 0 and (abs(number) < 1e-3 or abs(number) >= 1e7):
        return f"{number:.{digits - 1}e}"
    return f"{number:.{digits}g}" if abs(number) >= 1 else f"{number:.{digits}f}"


def _fmt_p(value: object) -> str:
    if not _is_number(value):
        return "–"
    number = float(value)  # type: ignore[arg-type]
    return "< 0.0001" if number < 1e-4 else f"{number:.4f}"


env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]),
                  trim_blocks=True, lstrip_blocks=True)
env.filters.update(int=_fmt_int, pct=_fmt_pct, num=_fmt_num, pvalue=_fmt_p)


def ctx(request: Request) -> AppContext:
    return request.app.state.ctx


def render(request: Request, template: str, title: str, status: int = 200, **values: object) -> HTMLResponse:
    context = ctx(request)
    page = env.get_template(template).render(
        title=title, nav=request.url.path, dataset=context.dataset, release_id=context.release.release_id,
        query=request.url.query, **values)
    return HTMLResponse(page, status_code=status)


def _params(request: Request) -> list[tuple[str, str]]:
    return list(request.query_params.multi_items())


def _first(params: list[tuple[str, str]], key: str, default: str | None = None) -> str | None:
    return next((value for name, value in params if name == key), default)


def _save_params(kind: str, params: list[tuple[str, str]]) -> str:
    return urlencode([(k, v) for k, v in params if k in PAGE_PARAMS[kind]])


def _saved_banner(request: Request) -> object:
    saved_id = request.query_params.get("saved")
    if saved_id and re.fullmatch(r"[0-9]{1,19}", saved_id):  # ASCII digits ('²'.isdigit() but int('²') fails)
        return ctx(request).workspace.get(int(saved_id))
    return None


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    context = ctx(request)
    manifest = context.manifest
    counts = {name: context.table.frequencies(name).tolist() for name in context.table.names}
    attribute_quality = manifest.attribute_quality
    rows = []
    for attribute in context.attributes(counts):
        name = attribute["name"]
        rows.append({**attribute, "distinct": sum(1 for v in attribute["values"] if v["count"] and not v["suppressed"]),
                     "quality": {model: values.get(name) for model, values in attribute_quality.items()}})
    return render(request, "overview.html", "overview", manifest=manifest.document(), seal=context.seal, rows=rows,
                  quality_models=list(attribute_quality), qis=context.quasi_identifiers(),
                  table=context.table, db=context.release, startup=context.startup_seconds)


@router.get("/cohort", response_class=HTMLResponse)
def cohort(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    error = None
    try:
        spec = context.cohort_from(params)
    except FilterError as exc:
        error, spec = str(exc), analyses.CohortSpec()
    result = analyses.cohort_count(context.table, spec, facets=True)
    return render(request, "cohort.html", "cohort builder", status=422 if error else 200, error=error, spec=spec,
                  result=result, attributes=context.attributes(result["facets"]),
                  save_kind="cohort", save_params=_save_params("cohort", params), saved=_saved_banner(request))


@router.get("/frequencies", response_class=HTMLResponse)
def frequencies(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    attribute = _first(params, "attr") or context.table.names[0]
    error, result, chart = None, None, None
    spec = analyses.CohortSpec()
    try:
        spec = context.cohort_from(params)
        result = analyses.frequency_table(context.table, attribute, spec)
        chart = charts.horizontal_bar_chart([r["value"] for r in result["rows"]], [r["count"] for r in result["rows"]],
                                 f"Frequencies of {attribute}", [r["percent"] for r in result["rows"]])
    except FilterError as exc:
        error = str(exc)
    return render(request, "frequencies.html", "frequencies", status=422 if error else 200, error=error,
                  attribute=attribute, spec=spec, result=result, chart=chart, names=context.table.names,
                  attributes=context.attributes(), save_kind="frequencies",
                  save_params=_save_params("frequencies", params), saved=_saved_banner(request))


@router.get("/crosstab", response_class=HTMLResponse)
def crosstab(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    names = context.table.names
    row = _first(params, "row") or names[0]
    col = _first(params, "col") or (names[1] if len(names) > 1 else names[0])
    mode = _first(params, "pct") or "row"
    if mode not in PCT_MODES:
        mode = "row"
    error, result, chart = None, None, None
    spec = analyses.CohortSpec()
    try:
        spec = context.cohort_from(params)
        result = analyses.cross_tabulation(context.table, row, col, spec)
        chart = charts.stacked_percent_bars(result["row_labels"], result["col_labels"], result["row_percent"],
                                            f"{col} within each value of {row} (row %)")
    except FilterError as exc:
        error = str(exc)
    return render(request, "crosstab.html", "cross-tabulation", status=422 if error else 200, error=error,
                  row=row, col=col, mode=mode, modes=PCT_MODES, spec=spec, result=result, chart=chart,
                  names=names, attributes=context.attributes(), save_kind="crosstab",
                  save_params=_save_params("crosstab", params), saved=_saved_banner(request))


@router.get("/compare", response_class=HTMLResponse)
def compare(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    attribute = _first(params, "attr") or context.table.names[0]
    error, result, chart = None, None, None
    spec_a = spec_b = analyses.CohortSpec()
    ran = any(name in ("a", "b") for name, _ in params)
    try:
        spec_a = context.cohort_from(params, "a", "xa")
        spec_b = context.cohort_from(params, "b", "xb")
        if ran:
            result = analyses.compare_cohorts(context.table, attribute, spec_a, spec_b)
            chart = charts.horizontal_grouped_bars([r["value"] for r in result["rows"]],
                                        [("A: " + result["cohort_a"], [r["percent_a"] for r in result["rows"]]),
                                         ("B: " + result["cohort_b"], [r["percent_b"] for r in result["rows"]])],
                                        f"{attribute} in cohorts A and B (%)")
    except FilterError as exc:
        error = str(exc)
    return render(request, "compare.html", "compare cohorts", status=422 if error else 200, error=error,
                  attribute=attribute, spec_a=spec_a, spec_b=spec_b, result=result, chart=chart,
                  names=context.table.names, attributes=context.attributes(), save_kind="compare",
                  save_params=_save_params("compare", params), saved=_saved_banner(request))


@router.get("/descriptive", response_class=HTMLResponse)
def describe(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    numeric = descriptive.numeric_attributes(context.table, context.quasi_identifiers())
    attribute = _first(params, "attr") or (numeric[0] if numeric else None)
    group = _first(params, "by") or None
    error, result = None, None
    spec = analyses.CohortSpec()
    try:
        spec = context.cohort_from(params)
        if attribute is not None:
            result = descriptive.describe(context.table, attribute, group, spec, context.quasi_identifiers())
    except FilterError as exc:
        error = str(exc)
    return render(request, "descriptive.html", "descriptive statistics", status=422 if error else 200, error=error,
                  attribute=attribute, group=group, numeric=numeric, spec=spec, result=result,
                  names=context.table.names, attributes=context.attributes(), save_kind="descriptive",
                  save_params=_save_params("descriptive", params), saved=_saved_banner(request))


@router.get("/histogram", response_class=HTMLResponse)
def histogram(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    numeric = descriptive.numeric_attributes(context.table, context.quasi_identifiers())
    attribute = _first(params, "attr") or (numeric[0] if numeric else context.table.names[0])
    bins_text = (_first(params, "bins") or "").strip()
    error, result, chart = None, None, None
    spec = analyses.CohortSpec()
    try:
        spec = context.cohort_from(params)
        if bins_text and not re.fullmatch(r"[0-9]{1,3}", bins_text):
            raise FilterError(f"the number of bins must be a whole number from 1 to {descriptive.MAX_BINS}")
        result = descriptive.histogram(context.table, attribute, spec, context.quasi_identifiers(),
                                       int(bins_text) if bins_text else None)
        title = (f"Histogram of {attribute}" if result["kind"] == "histogram" else f"Values of {attribute}")
        chart = charts.horizontal_bar_chart([r["label"] for r in result["rows"]], [r["count"] for r in result["rows"]],
                                            title, [r["percent"] for r in result["rows"]])
    except FilterError as exc:
        error = str(exc)
    return render(request, "histogram.html", "histogram", status=422 if error else 200, error=error,
                  attribute=attribute, bins=bins_text, numeric=numeric, spec=spec, result=result, chart=chart,
                  names=context.table.names, attributes=context.attributes(), save_kind="histogram",
                  save_params=_save_params("histogram", params), saved=_saved_banner(request))


def regression_from(params: list[tuple[str, str]]) -> regression.RegressionSpec:
    """The regression a page's query string asks for: model, y (outcome), event, x (predictors, repeated), ref
    (ATTRIBUTE=VALUE, the reference category; repeated), cat (numeric predictors to dummy-code), conf."""
    references: dict[str, str] = {}
    for name, value in params:
        if name == "ref":
            attribute, sep, label = value.partition("=")
            if sep and label:
                references[attribute] = label
    categorical = {value for name, value in params if name == "cat"}
    predictors = []
    for name, value in params:
        if name == "x" and value and value not in [p.attribute for p in predictors]:
            predictors.append(regression.Predictor(value, references.get(value),
                                                   True if value in categorical else None))
    conf_text = _first(params, "conf") or "0.95"
    try:
        confidence = float(conf_text)
    except ValueError:
        raise regression.RegressionError(f"the confidence level {conf_text!r} is not a number") from None
    if not math.isfinite(confidence):
        raise regression.RegressionError("the confidence level must be at least 0.5 and below 1")
    return regression.RegressionSpec(_first(params, "model") or "ols", _first(params, "y") or "", predictors,
                                     _first(params, "event") or None, confidence)


@router.get("/regression", response_class=HTMLResponse)
def fit_regression(request: Request) -> HTMLResponse:
    context = ctx(request)
    params = _params(request)
    numeric = descriptive.numeric_attributes(context.table, context.quasi_identifiers())
    error, result, chart = None, None, None
    spec = analyses.CohortSpec()
    model = regression.RegressionSpec(_first(params, "model") or "logit", _first(params, "y") or "")
    ran = any(name == "y" for name, _ in params)
    try:
        spec = context.cohort_from(params)
        model = regression_from(params)
        if ran:
            if not model.outcome:
                raise regression.RegressionError("choose an outcome")
            result = regression.fit(context.table, model, spec, context.quasi_identifiers())
            shown = [c for c in result["coefficients"] if c["attribute"] is not None]
            chart = coefficient_chart([c["term"] for c in shown], [c["coef"] for c in shown],
                                      [c["ci_low"] for c in shown], [c["ci_high"] for c in shown],
                                      f"Coefficients with {100 * model.confidence:.4g}% confidence intervals")
    except FilterError as exc:
        error = str(exc)
    chosen = {p.attribute: p for p in model.predictors}
    return render(request, "regression.html", "regression", status=422 if error else 200, error=error,
                  model=model, chosen=chosen, models=regression.MODELS, numeric=numeric, spec=spec, result=result,
                  chart=chart,
                  max_options=MAX_OPTIONS,
                  names=context.table.names, attributes=context.attributes(), save_kind="regression",
                  save_params=_save_params("regression", params), saved=_saved_banner(request))


@router.get("/analyses", response_class=HTMLResponse)
def saved_list(request: Request) -> HTMLResponse:
    context = ctx(request)
    return render(request, "analyses.html", "saved analyses", items=context.workspace.list(context.dataset),
                  release=context.release.release_id, message=request.query_params.get("message"))


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True, max_num_fields=20))


@router.post("/analyses")
async def save(request: Request) -> Response:
    context = ctx(request)
    form = await _form(request)
    kind = form.get("kind", "")
    try:
        if kind not in PAGE_PARAMS:
            raise WorkspaceError(f"unknown kind of analysis {kind!r}")
        pairs = [(k, v) for k, v in parse_qsl(form.get("params", ""), keep_blank_values=True, max_num_fields=400)
                 if k in PAGE_PARAMS[kind]]
        saved = context.workspace.save(form.get("name", ""), kind, pairs, context.dataset,
                                       context.release.release_id)
    except (WorkspaceError, ValueError) as exc:
        return render(request, "analyses.html", "saved analyses", status=getattr(exc, "status", 422),
                      items=context.workspace.list(context.dataset), release=context.release.release_id,
                      message=None, error=str(exc))
    return RedirectResponse(f"/analyses/{saved.id}", status_code=303)


@router.get("/analyses/{analysis_id}")
def open_saved(analysis_id: int, request: Request) -> Response:
    """Re-run a saved analysis: redirect to its page with its parameters."""
    saved = ctx(request).workspace.get(analysis_id)
    if saved is None or saved.kind not in PAGE_PARAMS:
        return render(request, "error.html", "not found", status=404,
                      message=f"There is no saved analysis number {analysis_id}.")
    query = urlencode([*saved.params, ("saved", str(saved.id))])
    return RedirectResponse(f"/{saved.kind}?{query}", status_code=303)


@router.post("/analyses/{analysis_id}/delete")
def delete_saved(analysis_id: int, request: Request) -> Response:
    ctx(request).workspace.delete(analysis_id)
    return RedirectResponse("/analyses?message=deleted", status_code=303)
