"""Release requests in the app: the JSON API (`/api/requests`) and the pages /requests and /requests/{n}.

The researcher's side of the airlock (issue 27): drafts, their texts, outputs and justifications, supporting files
for the checkers, submission (one atomic outbox entry the host-side intake takes) and withdrawal; the rules live in
`airlock_drafts`, shared by both paths so a page and a script are refused for the same reasons. Pages are plain
server-rendered forms (same-origin POSTs checked by SecurityMiddleware, the strict CSP, no inline script or style);
the host's status is displayed, escaped, and never decides anything but whether the draft may be edited again.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from .airlock_drafts import MAX_OUTPUTS_PER_REQUEST, MAX_TEXT, DraftError, Drafts, ReleaseRef
from .context import AppContext

router = APIRouter(prefix="/api", tags=["requests"])
page_router = APIRouter(include_in_schema=False)

Text = Annotated[str, Field(max_length=MAX_TEXT)]
OutputNumber = Annotated[int, Field(ge=1, le=999_999_999)]


class RequestOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output_id: OutputNumber
    justification: Text | None = Field(None, description="why this output is safe to release; required for a "
                                                         "`fail` or `review` output before submission")


class RequestChanges(BaseModel):
    """Fields left out are kept; lists replace the request's list."""
    model_config = ConfigDict(extra="forbid")
    context: Text | None = Field(None, description="what the outputs are, for which study")
    controls: Text | None = Field(None, description="what was done to make them safe")
    outputs: Annotated[list[RequestOutput], Field(max_length=MAX_OUTPUTS_PER_REQUEST)] | None = None
    note: Text | None = Field(None, description="a supporting note for the checkers only (saved as note.txt; "
                                                "empty removes it)")
    supporting_outputs: Annotated[list[OutputNumber], Field(max_length=MAX_OUTPUTS_PER_REQUEST)] | None = Field(
        None, description="outputs whose data.csv is attached for the checkers only (never released)")


def ctx(request: Request) -> AppContext:
    return request.app.state.ctx


def drafts(request: Request) -> Drafts:
    """The workspace's requests (made once per app, on first use)."""
    state = request.app.state
    found = getattr(state, "drafts", None)
    if found is None:
        from .output_routes import seal_sha256

        context = ctx(request)
        release = ReleaseRef(context.dataset, context.release.release_id, seal_sha256(context.seal))
        found = Drafts(context.outputs.root.parent, context.outputs, release, context.recipient)
        state.drafts = found
    return found


def _changes(body: RequestChanges | None) -> dict[str, Any]:
    if body is None:
        return {}
    out = {name: getattr(body, name) for name in body.model_fields_set}
    if "outputs" in out and out["outputs"] is not None:
        out["outputs"] = [item.model_dump() for item in body.outputs or []]
    return {k: v for k, v in out.items() if v is not None or k == "note"}


def _answer(function, *args) -> dict:
    try:
        return function(*args)
    except DraftError as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from None


# ---------------------------------------------------------------------------------------------------------------
# JSON API

@router.get("/requests", summary="The workspace's release requests, newest first, each with its state (the app's, "
                                 "or the airlock's status once it took the request)")
def list_requests(request: Request) -> list[dict]:
    store = drafts(request)
    return store.list()


@router.post("/requests", summary="Start a release request for the served release (at most one open per release); "
                                  "the body may set its texts, outputs and supporting files at once")
def create_request(request: Request, body: RequestChanges | None = None) -> dict:
    store = drafts(request)
    return _answer(store.create, _changes(body))


@router.get("/requests/{number}", summary="One request: texts, outputs with justifications, supporting files, its "
                                          "state, what still keeps it from submission, and the airlock's status")
def get_request(number: str, request: Request) -> dict:
    store = drafts(request)
    view = store.get(number)
    if view is None:
        raise HTTPException(status_code=404, detail=f"no request {number}")
    return view


@router.patch("/requests/{number}", summary="Change a draft (or a request the checkers returned): texts, outputs "
                                            "and their justifications, supporting note and outputs")
def patch_request(number: str, body: RequestChanges, request: Request) -> dict:
    store = drafts(request)
    return _answer(store.update, number, _changes(body))


@router.post("/requests/{number}/submit", summary="Submit the request to the airlock: refused with every reason "
                                                  "while incomplete; then frozen until the checkers return it")
def submit_request(number: str, request: Request) -> dict:
    store = drafts(request)
    return _answer(store.submit, number)


@router.post("/requests/{number}/withdraw", summary="Withdraw the request (the airlock is told when it has it)")
def withdraw_request(number: str, request: Request) -> dict:
    store = drafts(request)
    return _answer(store.withdraw, number)


# ---------------------------------------------------------------------------------------------------------------
# Pages and forms

def _render(request: Request, template: str, title: str, status: int = 200, **values) -> HTMLResponse:
    from .pages import render

    return render(request, template, title, status=status, **values)


def _list_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
    store = drafts(request)
    items = store.list()
    return _render(request, "requests.html", "requests", status=status, items=items, error=error,
                   open_numbers=store.open_for_release())


def _request_page(request: Request, view: dict, status: int = 200, error: str | None = None) -> HTMLResponse:
    store = drafts(request)
    context = ctx(request)
    in_request = {item["output_id"] for item in view["outputs"]}
    current = [o for o in context.outputs.list()
               if (o.get("release") or {}).get("id") == context.release.release_id]
    decisions = {str(o["output_id"]): o for o in (view.get("host_status") or {}).get("outputs", [])}
    attached = {item.get("output_id") for item in view.get("supporting", []) if item["kind"] == "output"}
    return _render(request, "request.html", f"request {view['number']}", status=status, req=view, error=error,
                   candidates=[o for o in current if o["id"] not in in_request], outputs_all=context.outputs.list(),
                   attached=attached, decisions=decisions, note=store.note(view["number"]),
                   message=request.query_params.get("message"))


@page_router.get("/requests", response_class=HTMLResponse)
def requests_page(request: Request) -> HTMLResponse:
    return _list_page(request)


@page_router.post("/requests")
async def create_from_page(request: Request) -> Response:
    from .output_routes import _form

    form = await _form(request)
    changes: dict[str, Any] = {k: form[k] for k in ("context", "controls") if form.get(k, "").strip()}
    if form.get("output_id"):  # "Request its release" on an output's page
        changes["outputs"] = [{"output_id": form["output_id"], "justification": form.get("justification") or None}]
    try:
        view = drafts(request).create(changes)
    except DraftError as exc:
        return _list_page(request, exc.status, str(exc))
    return RedirectResponse(f"/requests/{view['number']}?message=created", status_code=303)


@page_router.get("/requests/{number}", response_class=HTMLResponse)
def request_page(number: str, request: Request) -> HTMLResponse:
    view = drafts(request).get(number)
    if view is None:
        return _render(request, "error.html", "not found", status=404, message=f"There is no request {number}.")
    return _request_page(request, view)


def _items(view: dict) -> list[dict]:
    return [{"output_id": item["output_id"], "justification": item.get("justification")}
            for item in view["outputs"]]


def _page_change(store: Drafts, number: str, action: str, form: dict[str, str]) -> str:
    """Apply one form's change through the same rules as the API; the message the page shows after it."""
    view = store.get(number)
    if view is None:
        raise DraftError(f"there is no request {number}", 404)
    items = _items(view)
    output_id = form.get("output_id", "")
    if action == "texts":
        store.update(number, {"context": form.get("context", ""), "controls": form.get("controls", "")})
        return "saved"
    if action == "add-output":
        store.update(number, {"outputs": items + [{"output_id": output_id,
                                                   "justification": form.get("justification") or None}]})
        return "added"
    if action == "justify":
        changed = [{**item, "justification": form.get("justification", "")}
                   if str(item["output_id"]) == output_id else item for item in items]
        store.update(number, {"outputs": changed})
        return "justified"
    if action == "remove-output":
        store.update(number, {"outputs": [item for item in items if str(item["output_id"]) != output_id]})
        return "removed"
    if action == "replace-output":
        by = form.get("by", "")
        changed = [{"output_id": by, "justification": item["justification"]}
                   if str(item["output_id"]) == output_id else item for item in items]
        store.update(number, {"outputs": changed})
        return "replaced"
    if action == "note":
        store.update(number, {"note": form.get("note", "")})
        return "note"
    if action in ("attach", "detach"):
        ids = [item["output_id"] for item in view.get("supporting", []) if item["kind"] == "output"]
        ids = [i for i in ids if str(i) != output_id] + ([output_id] if action == "attach" else [])
        store.update(number, {"supporting_outputs": ids})
        return action + "ed"
    if action == "submit":
        store.submit(number)
        return "submitted"
    if action == "withdraw":
        store.withdraw(number)
        return "withdrawn"
    raise DraftError("there is no such action", 404)


@page_router.post("/requests/{number}/{action}")
async def request_action(number: str, action: str, request: Request) -> Response:
    from .output_routes import _form

    form = await _form(request)
    store = drafts(request)
    try:
        message = _page_change(store, number, action, form)
    except DraftError as exc:
        view = store.get(number)
        if view is None:
            return _render(request, "error.html", "not found", status=404, message=str(exc))
        return _request_page(request, view, exc.status, str(exc))
    return RedirectResponse(f"/requests/{number}?message={message}", status_code=303)


__all__ = ["page_router", "router"]
