"""Issue 27's whole airlock chain in one run, through real parts: a real `safeshare up` (app, kiosk, gateway, custodian
service, and its intake loop), the researcher in a headless Chromium on the app, two checkers each in a headless
Chromium of their own on the review pages, the front door's download with the recipient's token, and
`safeshare verify-output`.

1. The researcher saves a cross-tabulation from its analysis page ("Save as output"), starts a request with context
   and controls, adds the output with a justification and submits it (no Content-Security-Policy violation).
2. up's intake loop freezes it into HOME/airlock (the app's page shows the airlock's state and request id).
3. Two checkers, added with `safeshare custodian person add ... --password-file`, sign in to /review and approve;
   the second approval releases the request as a signed package.
4. The researcher downloads the package at the gateway's /outputs with the token, over HTTP.
5. `safeshare verify-output` passes on the download, against HOME's trust store.
6. Nothing else in the site changed hands: a snapshot of HOME (paths and sha256) before step 1 and after step 5
   differs, outside the enclave's own folders (the app's workspace, the kiosk's state), only in the airlock store's
   folder of this request (its frozen files and the package), the site database, the logs, the session folders, and
   the site's outputs key made at the first release (trust.json gaining that key and nothing else); the package is
   the only file the front door served (exactly one `downloaded` event), and the airlock's events of the chain are,
   in order, output-saved, submitted, voted, voted, approved, released, downloaded, each by its actor.

The stack runs once (module-scope fixtures; about 45 s in all); its teardown is `safeshare down`, after which no
process that names the test's folder (HOME, the browsers' profiles) is left.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cdp import Cdp, chromium, wait_for_js
from tests.cli_inprocess import run_cli
from tests.deploy.review_helpers import PASSWORD, write_password
from tests.deploy.test_review_browser import review
from tests.e2e.test_up import processes_mentioning
from tests.e2e.test_up_airlock import call, free_port, safeshare, stop_up
from tests.enclave.test_app_airlock_browser import submit_form, text
from tests.enclave.test_app_browser import WATCH_CSP

REPO = Path(__file__).resolve().parents[2]
HAVE_STACK = all(shutil.which(t) for t in ("Xvfb", "x11vnc", "chromium"))
pytestmark = pytest.mark.skipif(not HAVE_STACK, reason="Xvfb, x11vnc and chromium come from scripts/setup.sh")

CHECKERS = ("carol", "dave")
JUSTIFICATION = "Table 1 of the paper: counts of the released data, every cell of at least 10 records"


@dataclass
class Stack:
    """A running `safeshare up` and what it printed when ready."""

    root: Path  # outside HOME: browser profiles, the password file, the downloaded package
    home: Path
    ready: dict

    @property
    def token(self) -> str:
        return self.ready["url"].split("?token=", 1)[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    """`safeshare up --json` on a fresh HOME with two checkers added; `safeshare down` after the module."""
    root = tmp_path_factory.mktemp("airlock-chain")
    home = root / "home"
    log = open(root / "up.log", "w")
    up = subprocess.Popen([sys.executable, "-m", "safeshare.cli", "up", "--home", str(home), "--listen",
                           f"127.0.0.1:{free_port()}", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=log,
                          text=True, start_new_session=True)
    try:
        line = up.stdout.readline()
        assert line, (root / "up.log").read_text()[-3000:]
        ready = json.loads(line)
        password = write_password(root, PASSWORD)
        for name in CHECKERS:
            done = run_cli("custodian", "person", "add", name, "--role", "checker", "--password-file",
                           str(password), "--site", str(home))  # in process: the same main(argv), no interpreter
            assert done.returncode == 0, done.stderr
        yield Stack(root, home, ready)
    finally:
        done = stop_up(home, up, log)
    assert done.returncode == 0, done.stderr
    assert up.returncode == 0, (root / "up.log").read_text()[-3000:]
    assert processes_mentioning(str(root)) == []  # up's components and the three browsers (profiles in ROOT)


def snapshot(home: Path) -> dict[str, str]:
    """Every path under HOME: a file's sha256, a folder's "dir", a link's target (never followed)."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(home):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(home).as_posix()
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            elif path.is_file():
                try:
                    found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                except FileNotFoundError:  # a log or journal rotated away while walking
                    continue
            else:
                found[rel] = "other"
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """Paths new, changed or gone between two snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


async def researcher(cdp: Cdp, app: str) -> dict:
    """Save a cross-tabulation as an output, put it in a new request with its texts and a justification, submit, and
    wait until up's intake has taken it (the request's page shows the airlock's state)."""
    seen: dict = {}
    await cdp.send("Page.enable")
    await cdp.send("Page.addScriptToEvaluateOnNewDocument", source=WATCH_CSP)
    await cdp.navigate(app + "crosstab?row=sex&col=race&pct=none")
    await cdp.evaluate("document.getElementById('output-name').value = 'sex by race'")
    await submit_form(cdp, "document.getElementById('output-form')")
    seen["output_status"] = await text(cdp, "output-status")
    seen["output_id"] = (await cdp.evaluate("location.pathname")).rsplit("/", 1)[1]
    seen["csp"] = await cdp.evaluate("window.__csp") or []
    await cdp.navigate(app + "outputs")
    await cdp.evaluate("window.__previousDocument = true")
    await cdp.evaluate("document.getElementById('requests-link').click()")
    await wait_for_js(cdp, "!window.__previousDocument && document.readyState === 'complete' && "
                           "!!document.getElementById('new-request-form')", 15)
    await cdp.evaluate("document.getElementById('new-context').value = 'Table 1 of the wage-gap study'")
    await cdp.evaluate("document.getElementById('new-controls').value = 'counts of the released data only'")
    await submit_form(cdp, "document.getElementById('new-request-form')")
    seen["request_page"] = await cdp.evaluate("location.pathname")
    await cdp.evaluate(f"document.getElementById('add-output').value = {seen['output_id']!r}")
    await cdp.evaluate(f"document.getElementById('add-justification').value = {JUSTIFICATION!r}")
    await submit_form(cdp, "document.getElementById('add-output-form')")
    seen["csp"] += await cdp.evaluate("window.__csp") or []
    await submit_form(cdp, "document.getElementById('submit-form')")
    seen["after_submit"] = await text(cdp, "request-state")
    deadline = time.monotonic() + 30  # up's intake looks at HOME/app every second
    while True:
        await cdp.navigate(app + seen["request_page"].lstrip("/"))
        seen["host_state"] = await text(cdp, "host-state")
        if seen["host_state"] == "submitted":
            break
        assert time.monotonic() < deadline, f"the intake did not take the request in: {seen}"
        await asyncio.sleep(0.5)
    seen["request_id"] = await text(cdp, "host-request-id")
    seen["csp"] += await cdp.evaluate("window.__csp") or []
    return seen


@dataclass
class Chain:
    """What steps 1 to 5 showed, and HOME before and after them."""

    researcher: dict = field(default_factory=dict)
    checkers: dict = field(default_factory=dict)
    listing: tuple[int, bytes] = (0, b"")
    package: bytes = b""
    verified: subprocess.CompletedProcess | None = None
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    trust_before: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)  # `safeshare custodian events --json`, every source

    @property
    def request_id(self) -> str:
        return self.researcher["request_id"]

    @property
    def airlock_events(self) -> list[dict]:
        return [e for e in self.events if e.get("source") == "airlock"]


@pytest.fixture(scope="module")
def chain(stack: Stack) -> Chain:
    """Steps 1 to 5, once, with HOME's snapshot before the first and after the last."""
    ready, home = stack.ready, stack.home
    result = Chain(trust_before=json.loads((home / "trust.json").read_text()), before=snapshot(home))

    async def browsers() -> None:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with chromium(stack.root / "researcher", http, window="1280,900") as cdp:
                result.researcher = await researcher(cdp, ready["app"])
            base = ready["review"].removesuffix("/review")
            for name in CHECKERS:  # each in a browser (profile) of their own
                async with chromium(stack.root / name, http, window="1280,900") as cdp:
                    result.checkers[name] = await review(cdp, base, name, result.request_id, None)

    asyncio.run(asyncio.wait_for(browsers(), 240))
    gateway = ready["gateway"].rstrip("/")
    result.listing = call(f"{gateway}/outputs", cookie=stack.token)
    status, result.package = call(f"{gateway}/outputs/{result.request_id}/package.zip", cookie=stack.token)
    assert status == 200, result.package[:500]
    (stack.root / "package.zip").write_bytes(result.package)
    result.verified = safeshare("verify-output", str(stack.root / "package.zip"), "--site", str(home), "--json")
    result.after = snapshot(home)
    events = run_cli("custodian", "events", "--site", str(home), "--json")
    assert events.returncode == 0, events.stderr
    result.events = json.loads(events.stdout)
    return result


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def saved_files(stack: Stack, output_id: str) -> dict[str, str]:
    """The sha256 of what the app saved for the output, in its workspace (the rendering stays in the enclave)."""
    folder = stack.home / "app" / "outputs" / output_id
    return {name: sha256((folder / name).read_bytes()) for name in ("data.csv", "meta.json")}


def test_the_researcher_saves_an_output_and_submits_a_request_in_chromium(stack: Stack, chain: Chain) -> None:
    seen = chain.researcher
    assert seen["output_id"] == "1" and seen["output_status"] in ("pass", "review", "fail")
    assert seen["request_page"] == "/requests/1" and seen["after_submit"] == "submitting"
    # up's intake loop took it: the page shows the airlock's state and the id under which HOME/airlock froze it
    assert seen["host_state"] == "submitted"
    from deploy.site.folder import Site
    from outputs.airlock.store import AirlockStore, rid_of

    assert rid_of(chain.request_id) == Site(stack.home).recipient_id(stack.ready["recipient"])
    frozen = AirlockStore(stack.home).read_request(chain.request_id)
    assert frozen["context"] == "Table 1 of the wage-gap study"
    assert frozen["controls"] == "counts of the released data only"
    (output,) = frozen["outputs"]
    assert output["output_id"] == "1" and output["justification"] == JUSTIFICATION
    assert {name: f["sha256"] for name, f in output["files"].items()} == saved_files(stack, "1")
    assert seen["csp"] == [], seen["csp"]


def test_two_checkers_sign_in_to_the_review_pages_and_approve(stack: Stack, chain: Chain) -> None:
    carol, dave = chain.checkers["carol"], chain.checkers["dave"]
    assert carol["login_path"] == "/review/login" and carol["cookie_visible_to_script"] == ""
    assert carol["queue"][0][:4] == [chain.request_id, stack.ready["recipient"], carol["queue"][0][2], "submitted"]
    assert carol["outputs"] == dave["outputs"] == ["1"]
    assert carol["state"] == "submitted" and carol["decisions"] == ["pending"]
    assert carol["votes_1"] == ["carol:approve"]  # her own vote only until the second checker has voted
    assert dave["state"] == "released" and dave["decisions"] == ["approved"]
    assert "packaged and signed" in dave["message"]
    assert sorted(dave["votes_1"]) == ["carol:approve", "dave:approve"]
    assert carol["csp"] == [] and dave["csp"] == []
    signed_in = [e["actor"] for e in chain.events if e["action"] == "review-sign-in"]
    assert signed_in == ["review:carol", "review:dave"]


def test_the_package_is_downloaded_at_the_front_door_and_verifies(stack: Stack, chain: Chain) -> None:
    from outputs.airlock.store import AirlockStore

    status, page = chain.listing
    link = f"/outputs/{chain.request_id}/package.zip".encode()
    assert status == 200 and page.count(link) == 1
    assert chain.package.startswith(b"PK")
    stored = AirlockStore(stack.home).package_file(chain.request_id)
    assert sha256(chain.package) == sha256(stored.read_bytes())  # what was served is what the checkers released
    with zipfile.ZipFile(stack.root / "package.zip") as package:
        assert sorted(package.namelist()) == ["files/1/data.csv", "files/1/meta.json", "manifest.json",
                                              "signature.json"]
        manifest = json.loads(package.read("manifest.json"))
    assert manifest["context"] == "Table 1 of the wage-gap study"
    assert manifest["outputs"][0]["justification"] == JUSTIFICATION
    assert chain.verified.returncode == 0, chain.verified.stdout + chain.verified.stderr
    verified = json.loads(chain.verified.stdout)
    assert verified["verified"] is True and verified["request_id"] == chain.request_id
    assert verified["recipient"] == stack.ready["recipient"] and verified["approved_by"] == {"1": ["carol", "dave"]}
    # the files that left are, byte for byte, what the researcher saved in the enclave
    assert {f["name"]: f["sha256"] for f in verified["files"]} == saved_files(stack, "1")


def test_nothing_else_in_the_site_changed_hands(stack: Stack, chain: Chain) -> None:
    from outputs.airlock.store import rid_of

    rid = rid_of(chain.request_id)
    request_folder = f"airlock/{rid}/{chain.request_id}"
    allowed = (
        lambda p: p.startswith("app/"),  # the enclave's own workspace: the output, the draft, the outbox, the status
        lambda p: p == f"airlock/{rid}" or p == request_folder or p.startswith(request_folder + "/"),
        lambda p: p == f"airlock/{rid}/.release-{chain.request_id}.lock",  # the release's lock, named after it
        lambda p: p in ("db/safeshare.db", "db/safeshare.db-wal", "db/safeshare.db-shm", "db/safeshare.db-journal"),
        lambda p: p.startswith("logs/") or p.startswith("sessions/"),
        # the site's outputs key, made at its first release (what trust.json gains is checked below)
        lambda p: p in ("keys/outputs-signing.key", "keys/outputs-signing.key.signed", "trust.json"),
    )
    differs = changed(chain.before, chain.after)
    assert sorted(p for p in differs if not any(rule(p) for rule in allowed)) == []
    assert not [p for p in differs if p not in chain.after]  # nothing outside the enclave was removed either
    # the request's folder holds the frozen files of the one output and the package, nothing else
    frozen = sorted(p.removeprefix(request_folder + "/") for p in chain.after if p.startswith(request_folder + "/")
                    and chain.after[p] != "dir")
    assert frozen == ["outputs/1/data.csv", "outputs/1/meta.json", "package.zip", "request.json"]
    for name, digest in saved_files(stack, "1").items():
        assert chain.after[f"{request_folder}/outputs/1/{name}"] == digest
    assert chain.after[f"airlock/{rid}/.release-{chain.request_id}.lock"] == sha256(b"")
    # trust.json kept every key it had and gained only the outputs key that signed the package
    trust_after = json.loads((stack.home / "trust.json").read_text())
    gained = [k for k in trust_after["keys"] if k not in chain.trust_before["keys"]]
    assert all(k in trust_after["keys"] for k in chain.trust_before["keys"])
    assert [(k["purpose"], k["key_id"]) for k in gained] == [("outputs", json.loads(chain.verified.stdout)["key_id"])]
    # the front door served that package and nothing else
    served = [e for e in chain.airlock_events if e["action"] in ("downloaded", "download-refused")]
    assert [(e["action"], e["request_id"]) for e in served] == [("downloaded", chain.request_id)]
    assert served[0]["detail"]["package_sha256"] == sha256(chain.package)


def test_the_airlock_events_of_the_chain_in_order(stack: Stack, chain: Chain) -> None:
    researcher = f"recipient:{stack.ready['recipient']}"
    events = chain.airlock_events
    assert [(e["action"], e["actor"]) for e in events] == [
        ("output-saved", researcher), ("submitted", researcher), ("voted", "checker:carol"),
        ("voted", "checker:dave"), ("approved", "system:airlock"), ("released", "checker:dave"),
        ("downloaded", researcher)]
    assert all(e["outcome"] == "ok" and e["recipient"] == stack.ready["recipient"] for e in events)
    assert [e["request_id"] for e in events] == [None] + [chain.request_id] * 6
    saved = saved_files(stack, "1")
    assert events[0]["detail"]["output_id"] == "1" and saved.items() <= events[0]["detail"]["files"].items()
    assert events[1]["detail"]["outputs"] == {"1": saved}
    assert [(e["detail"]["checker"], e["detail"]["vote"]) for e in events[2:4]] == [("carol", "approve"),
                                                                                   ("dave", "approve")]
    assert events[4]["detail"]["decisions"]["1"]["approved_by"] == ["carol", "dave"]
    assert events[5]["detail"]["package_sha256"] == events[6]["detail"]["package_sha256"] == sha256(chain.package)
    times = [e["at"] for e in events]
    assert times == sorted(times)
