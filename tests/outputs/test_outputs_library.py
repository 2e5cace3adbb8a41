"""outputs/ is a plain library (issue 30 item 4, DESIGN.md: "the output disclosure-control rules stay usable as plain
libraries on a laptop (no web framework, no network)"), and the airlock store's format is defined once, in
outputs/airlock/store.py, as proxy/sessiondir.py defines a session folder's.

The import rules are checked on the source (every import at any depth, so a lazy import inside a function counts)
and by loading every outputs/ module in a fresh interpreter. The store's one-home rule is checked on the source of
every package that touches the airlock: no path is built from the store's file names by hand."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outputs.airlock.store import AirlockStore, ChecksumMismatch, StoreError
from tests.import_scan import imports_in_source, imports_under, module_name, offending
from tests.outputs.airlock_helpers import open_airlock, submit

REPO = Path(__file__).resolve().parents[2]
WEB = {"fastapi", "starlette", "jinja2", "uvicorn", "aiohttp", "flask", "django", "werkzeug", "httpx", "requests",
       "websockets", "http.server", "http.client", "urllib.request", "socket", "socketserver"}
COMPONENTS = {"enclave", "proxy", "deploy"}


def _modules() -> list[str]:
    return [module_name(REPO, p) for p in sorted((REPO / "outputs").rglob("*.py")) if "__pycache__" not in p.parts]


def test_outputs_imports_no_web_framework_no_network_and_no_component():
    imports = imports_under(REPO, "outputs")
    assert any(imp.module == "outputs.airlock.store" for imp in imports)  # the scan reads the package's imports
    bad = offending(imports, WEB | COMPONENTS)
    assert not bad, "outputs/ must stay a plain library:\n" + "\n".join(map(str, bad))


def test_the_scan_catches_a_web_framework_imported_inside_a_function():
    source = ("def page():\n"
              "    from fastapi.responses import HTMLResponse\n"
              "    import jinja2\n"
              "    from ...enclave.app import application\n")
    found = offending(imports_in_source(source, "outputs.airlock.sample", False), WEB | COMPONENTS)
    assert {imp.top for imp in found} == {"fastapi", "jinja2", "enclave"}


def test_loading_every_outputs_module_loads_no_web_framework():
    modules = _modules()
    assert "outputs.checks" in modules and "outputs.airlock.store" in modules
    tops = sorted({name.split(".")[0] for name in WEB | COMPONENTS})
    code = ("import importlib, json, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {tops!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    # the standard library's socket may come with anything (asyncio, logging handlers): what counts is that
    # nothing of the web and no component does
    assert not {m for m in loaded if m.split(".")[0] not in {"socket", "socketserver", "http", "urllib"}}, loaded


# --- the store's format, defined once -------------------------------------------------------------------------------

STORE_NAMES = {"airlock", "request.json", "package.zip", "supporting"}
STORE_FILE = "package.zip"
STORE_HIDDEN = (".release-", ".round-")  # as the f-strings that name them begin: f".release-{request_id}.lock"
# the modules that define a format: the store (SITE/airlock) and the app's workspace (STATE/airlock)
FORMAT_HOMES = {Path("outputs/airlock/store.py"), Path("outputs/airlock/workspace.py")}
# the download URL's last part is an HTTP path (proxy.outputs_door.PACKAGE_NAME), not the store's file
URL_NAMES = {(Path("proxy/outputs_door.py"), "package.zip")}


def hand_built_paths(path: Path, source: str) -> list[str]:
    """`X / "request.json"`-style paths from the store's names, a name of the store's given again (`AIRLOCK_DIR =
    "airlock"`), and strings naming its files or hidden folders (a glob of `*/*/package.zip`, an f-string
    `.release-{id}.lock`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                and node.value.value in STORE_NAMES - {"supporting"} and (path, node.value.value) not in URL_NAMES:
            found.append(f"{path}:{node.lineno}: names the store's {node.value.value!r} again")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value in STORE_NAMES:
                    found.append(f"{path}:{node.lineno}: path built from {side.value!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 40:
            text = node.value
            if ((STORE_FILE in text and " " not in text and (path, text) not in URL_NAMES)
                    or text in STORE_HIDDEN):
                found.append(f"{path}:{node.lineno}: names the store's file {text!r}")
    return found


@pytest.mark.parametrize("package", ["outputs", "proxy", "enclave", "deploy", "safeshare"])
def test_no_airlock_store_path_is_built_by_hand(package: str):
    problems = []
    for file in sorted((REPO / package).rglob("*.py")):
        rel = file.relative_to(REPO)
        if rel not in FORMAT_HOMES and "__pycache__" not in rel.parts:
            problems += hand_built_paths(rel, file.read_text(encoding="utf-8"))
    assert not problems, "go through outputs.airlock.store:\n" + "\n".join(problems)


def test_the_hand_built_path_check_can_fail():
    source = ("def f(site, rid, request_id):\n"
              "    a = site / 'airlock' / rid / request_id / 'request.json'\n"
              "    b = sorted(site.glob('*/*/package.zip'))\n"
              "    c = site / f'.release-{request_id}.lock'\n"
              "AIRLOCK_DIR = 'airlock'\n")
    assert len(hand_built_paths(Path("x.py"), source)) == 5


def test_the_store_opens_only_a_sites_airlock_folder(tmp_path: Path):
    store = AirlockStore.at(tmp_path / "airlock")
    assert store.root == tmp_path / "airlock" and store.site_root == tmp_path
    with pytest.raises(StoreError, match=r"--airlock .*/elsewhere: must be a site's airlock folder \(SITE/airlock\)"):
        AirlockStore.at(tmp_path / "elsewhere", "--airlock")


def test_frozen_reads_refuse_a_file_changed_after_submission(tmp_path: Path):
    airlock = open_airlock(tmp_path / "site")
    request_id = submit(airlock).request_id
    frozen = airlock.frozen(request_id)
    listed = frozen["outputs"][0]["files"]
    store = airlock.store
    assert store.read_frozen_output_file(request_id, "1", "data.csv", listed) == \
        store.read_output_file(request_id, "1", "data.csv")
    store.output_file(request_id, "1", "data.csv").write_bytes(b"sex,count\nfemale,3\n")
    with pytest.raises(ChecksumMismatch, match="checksum mismatch: data.csv"):
        store.read_frozen_output_file(request_id, "1", "data.csv", listed)
    with pytest.raises(ChecksumMismatch):  # a file request.json does not list is not one that was frozen
        store.read_frozen_output_file(request_id, "1", "meta.json", {})
    with pytest.raises(FileNotFoundError):
        store.read_frozen_supporting(request_id, "note.txt", {"note.txt": {"sha256": "0" * 64}})
    airlock.close()


def test_package_files_locks_and_bounded_reads_are_the_stores(tmp_path: Path):
    airlock = open_airlock(tmp_path / "site")
    request_id = submit(airlock).request_id
    store = airlock.store
    rid = request_id.split("-")[0]
    assert store.release_lock_file(request_id) == store.root / rid / f".release-{request_id}.lock"
    assert store.package_files() == []
    written = store.write_package(request_id, b"PK-not-really")
    assert written == store.package_file(request_id) == store.root / rid / request_id / "package.zip"
    assert store.package_files() == [written] and store.read_package(request_id) == b"PK-not-really"
    assert not [p for p in written.parent.iterdir() if p.name.startswith(".")]  # no temp file left
    with pytest.raises(OSError, match="more than a package can be"):
        store.read_package(request_id, limit=4)
    written.unlink()
    os.symlink(tmp_path / "elsewhere.zip", written)
    (tmp_path / "elsewhere.zip").write_bytes(b"other")
    with pytest.raises(OSError):  # never followed
        store.read_package(request_id)
    airlock.close()
