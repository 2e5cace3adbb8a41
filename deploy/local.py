"""`safeshare up`: one whole enclave on this machine, as local processes (DESIGN.md: "local processes in dev").

The walk is the production one, only on one host: de-identify the demo table with its dataset policy, seal the
release (refused if the gate fails), start the analytics app on that bundle, the kiosk on the app, issue a token for
the demo recipient bound to the kiosk's VNC endpoint, and start the gateway. Everything writes under one home folder:

    HOME/logs/           one log per component (deid, app, kiosk, gateway) and the kiosk's own logs
    HOME/releases/       sealed bundles, signed with HOME/keys/release-signing.key (made on first use, 0600)
    HOME/trust.json      the public keys the app checks the seal's signature against (a site's layout)
    HOME/sessions/       session folders (events.jsonl, recording, meta.json)
    HOME/db/safeshare.db tokens, targets and the gateway's anchors (SQLite unless --db says otherwise): where any
                         site keeps its database (safeshare.sitedb), so that the custodian service, `audit` and
                         every other tool pointed at HOME with --site open this file; an old home's
                         HOME/safeshare.db is moved there on start
    HOME/up.json         what runs (pids, URLs), for `safeshare status` and `safeshare down`; removed on stop
    HOME/app/            the app's workspace (saved analyses, outputs, airlock drafts and outbox)
    HOME/airlock/        the airlock store: requests frozen by the intake, packages released by the checkers

The airlock runs as at a site: the intake (deploy/airlock/intake.py) freezes what the app submits from HOME/app
into HOME/airlock (a thread of this process, which, like the custodian side, is not the enclave), the custodian
service (`safeshare custodian serve --site HOME`) serves the checkers' review pages at /review, and the gateway
serves released packages to the recipient at /outputs with their token.

Any component that exits ends the whole enclave (fail closed), and stopping goes gateway first (live sessions are
ended and sealed), then kiosk, then app; the demo token is revoked so the printed URL stops working.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from deploy.children import (Child, ComponentFailed, OrphanReaper, become_subreaper, pid_alive, reap_strays,
                             safeshare_argv)
from deploy.plan import app_argv, gateway_argv, kiosk_argv, release_ref
from deploy.readiness import wait_for_http_ok
from enclave.kiosk.ready import find_ready
from safeshare.signing import GATEWAY_KEY, TRUST_FILE, ensure_key
from safeshare.sitedb import migrate_legacy, site_db_url

REPO_POLICIES = Path(__file__).resolve().parent.parent / "policies" / "examples"
DEFAULT_POLICY = REPO_POLICIES / "adult-k5.yaml"
DEFAULT_RECIPIENT = REPO_POLICIES / "recipient-demo.yaml"
STATE_FILE = "up.json"
READY_TIMEOUT = 60.0


def default_home() -> Path:
    return Path(os.environ.get("SAFESHARE_HOME", ".safeshare")).resolve()


@dataclass
class UpConfig:
    home: Path
    policy: Path = DEFAULT_POLICY
    recipient_policy: Path = DEFAULT_RECIPIENT
    gateway_listen: str = "127.0.0.1:6080"
    app_port: int = 0  # 0: a free port
    size: str | None = None
    network: str = "auto"
    db_url: str | None = None
    token_ttl: timedelta = timedelta(hours=8)
    novnc_dir: str = "/usr/share/novnc"
    review_listen: str = "127.0.0.1:0"  # the custodian service (review pages); port 0: a free one
    intake_interval: float = 1.0  # seconds between the intake's looks at HOME/app

    @property
    def db(self) -> str:
        return self.db_url or site_db_url(self.home)


@dataclass
class Ready:
    """What `up` prints once everything runs (the JSON form has these fields)."""

    url: str  # researcher URL, with the token
    gateway: str
    app: str
    release: str
    recipient: str
    token_id: int
    vnc: str
    display: str
    home: str
    seconds: float
    pids: dict[str, int] = field(default_factory=dict)
    review: str = ""  # the checkers' review pages (custodian service), /review

    def as_dict(self) -> dict:
        return {"event": "ready", **self.__dict__}


class AlreadyRunning(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_state(home: Path) -> dict | None:
    try:
        return json.loads((home / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_state(home: Path, state: dict) -> None:
    path = home / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)


def seal_demo_release(policy: Path, home: Path, say: Callable[[str], None]) -> Path:
    """De-identify with the policy and seal the result; BundleError (gate failed) or engine errors propagate."""
    from engine.bundle import seal_release
    from engine.deid import deidentify, write_release

    result = deidentify(policy)
    out = home / "deid" / result.policy.dataset
    manifest = write_release(result, out)
    passed = manifest.gate is not None and manifest.gate.passed
    say(f"de-identified {manifest.dataset}: {manifest.records} records, {manifest.suppressed_records} "
        f"suppressed, loss quality {manifest.quality.get('loss', float('nan')):.4f}, gate "
        f"{'passed' if passed else 'FAILED'} ({result.seconds:.1f} s)")
    # Signed with HOME/keys/release-signing.key, trusted in HOME/trust.json: both made on first use, as at a site.
    # The policy given, not the output's manifest, says which columns are released and which are quasi-identifiers.
    return seal_release(out, home / "releases", trust=home / TRUST_FILE, policy=result.policy)


def ensure_gateway_key(home: Path) -> Path:
    """HOME/secrets/gateway/signing.key, where a site keeps it: signs every session's seal; trusted in
    HOME/trust.json (both made on first use)."""
    gateway_key = home / GATEWAY_KEY
    gateway_key.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(gateway_key.parent, 0o700)
    ensure_key(gateway_key, home / TRUST_FILE, "gateway", comment="gateway key of `safeshare up`")
    return gateway_key


def component_argv(config: UpConfig, bundle: Path, app_port: int,
                   recipient: str | None = None) -> dict[str, list[str]]:
    """The app's, kiosk's and gateway's command lines, from the builders provisioning's containers use too
    (deploy/plan.py), with this home's paths and loopback addresses. HOME is a site: its outputs.yaml (if any) is the
    app's output floor, HOME/app the app's workspace, HOME/airlock the store whose packages the gateway serves."""
    from outputs.airlock.store import AIRLOCK_DIR  # HOME/airlock: the airlock store, as SITE/airlock at a site
    from outputs.floor import OUTPUTS_FILE  # here: the rules load yaml and pydantic, which `safeshare --help` must not

    home = config.home
    kiosk = kiosk_argv(url=f"http://127.0.0.1:{app_port}/", state=str(home / "kiosk"), network=config.network,
                       logs=str(home / "logs" / "kiosk"), size=config.size,
                       policy=str(config.recipient_policy))  # screen (unless --size), recipient, watermark
    return {
        "app": safeshare_argv("app", *app_argv(bundle=str(bundle), trust=str(home / TRUST_FILE),
                                               state=str(home / "app"), host="127.0.0.1", port=app_port,
                                               release=release_ref(bundle), recipient=recipient,
                                               site=str(home) if (home / OUTPUTS_FILE).is_file() else None)),
        "kiosk": safeshare_argv("kiosk", *kiosk),
        "custodian": safeshare_argv("custodian", "serve", "--site", str(home), "--listen", config.review_listen,
                                    *(("--db", config.db_url) if config.db_url else ())),
        "gateway": safeshare_argv("gateway", *gateway_argv(
            listen=config.gateway_listen, sessions=str(home / "sessions"), db=config.db,
            signing_key=str(home / GATEWAY_KEY), limits=str(config.recipient_policy), novnc=config.novnc_dir,
            airlock=str(home / AIRLOCK_DIR))),
    }


class LocalEnclave:
    """Starts, supervises and stops the components; `run()` blocks until a signal or a component failure."""

    def __init__(self, config: UpConfig, say: Callable[[str], None] = print) -> None:
        self.config = config
        self.say = say
        self.children: dict[str, Child] = {}
        self.token_id: int | None = None
        self.ready: Ready | None = None
        self.failure: str | None = None
        self.intake: Any = None  # the airlock intake over HOME/app (deploy/airlock/intake.py), once started
        self._stop = threading.Event()
        self._reaper = OrphanReaper(lambda: {child.pid for child in self.children.values() if child.pid})

    # ---- start ------------------------------------------------------------------------------------------------

    def start(self) -> Ready:
        cfg = self.config
        began = time.monotonic()
        home = cfg.home
        existing = read_state(home)
        if existing and pid_alive(existing.get("pid")):
            raise AlreadyRunning(f"an enclave already runs from {home} (pid {existing['pid']}); "
                                 f"`safeshare down --home {home}` stops it")
        if cfg.db_url is None and (moved := migrate_legacy(home)) is not None:  # refuses a home with two
            self.say(f"moved the database of the old layout to {moved}")
        from outputs.airlock.store import AIRLOCK_DIR  # HOME/airlock: the airlock store, as SITE/airlock at a site

        for sub in ("logs", "releases", "sessions", "kiosk", "app", AIRLOCK_DIR):
            (home / sub).mkdir(parents=True, exist_ok=True)
        if become_subreaper():
            self._reaper.start()
        from policies.recipient import load_recipient_policy

        recipient = load_recipient_policy(cfg.recipient_policy)  # bad input before anything starts

        self.say(f"[1/6] de-identifying with {cfg.policy}")
        bundle = seal_demo_release(cfg.policy, home, self.say)
        self.say(f"      sealed release {bundle}")

        app_port = cfg.app_port or free_port()
        app_url = f"http://127.0.0.1:{app_port}/"
        review_host, _, review_port = cfg.review_listen.rpartition(":")
        if review_port == "0":
            cfg = self.config = replace(cfg, review_listen=f"{review_host}:{free_port(review_host)}")
        argv = component_argv(cfg, bundle, app_port, recipient=recipient.recipient)
        self.say(f"[2/6] analytics app on {app_url}")
        app = self._spawn("app", argv["app"])
        app.wait_for(lambda text: "app ready" in text, READY_TIMEOUT, "the app's ready line")
        _wait_http(app_url, READY_TIMEOUT, app)

        self.say("[3/6] kiosk: Xvfb, VNC server, Chromium")
        kiosk = self._spawn("kiosk", argv["kiosk"])
        endpoint = kiosk.wait_for(find_ready, READY_TIMEOUT, "a browser window on the app")
        assert isinstance(endpoint, dict)

        self.say(f"[4/6] token for {recipient.recipient}")
        from proxy.tokens import TokenStore, issue_for_policy

        store = TokenStore(cfg.db)
        try:
            issued = issue_for_policy(store, recipient, cfg.recipient_policy.resolve(), endpoint["upstream"],
                                      expires_at=datetime.now(timezone.utc) + cfg.token_ttl,
                                      password_file=endpoint["password_file"], target_name=f"local-{home.name}",
                                      release=release_ref(bundle))
        finally:
            store.dispose()
        self.token_id = issued.token_id

        self.say(f"[5/6] gateway on {cfg.gateway_listen}")
        ensure_gateway_key(home)
        gateway = self._spawn("gateway", argv["gateway"])
        base = gateway.wait_for(_gateway_ready, READY_TIMEOUT, "the gateway's listening line")
        assert isinstance(base, str)

        review = f"http://{cfg.review_listen}/review"
        self.say(f"[6/6] airlock: intake over {home / 'app'}, review pages on {review}")
        from deploy.airlock.intake import local_intake

        self.intake = local_intake(home, cfg.db, recipient.recipient, bundle, cfg.intake_interval)
        custodian = self._spawn("custodian", argv["custodian"])
        _wait_http(f"http://{cfg.review_listen}/healthz", READY_TIMEOUT, custodian)
        self.ready = Ready(url=f"{base}?token={issued.token}", gateway=base, app=app_url, release=str(bundle),
                           recipient=recipient.recipient, token_id=issued.token_id, vnc=endpoint["upstream"],
                           display=endpoint.get("display", ""), home=str(home),
                           seconds=round(time.monotonic() - began, 2),
                           pids={name: child.pid for name, child in self.children.items() if child.pid},
                           review=review)
        write_state(home, {"pid": os.getpid(), "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "gateway": base, "app": app_url, "release": str(bundle), "recipient": recipient.recipient,
                           "token_id": issued.token_id, "vnc": endpoint["upstream"], "review": review,
                           "components": {name: {"pid": child.pid, "log": str(child.log)}
                                          for name, child in self.children.items()}})
        return self.ready

    def _spawn(self, name: str, argv: list[str]) -> Child:
        child = Child(name, argv, self.config.home / "logs" / f"{name}.log")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        child.start(env)
        self.children[name] = child
        return child

    # ---- run and stop -----------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def supervise(self) -> None:
        """Until asked to stop or a component exits (then `failure` says which)."""
        while not self._stop.wait(0.25):
            for child in self.children.values():
                if not child.running():
                    code = child.proc.returncode if child.proc is not None else None
                    self.failure = f"{child.name} exited with {code} (log {child.log})"
                    return

    def stop(self) -> list[int]:
        """Gateway, custodian service, kiosk, app, in that order, then the intake (a submission the app made last
        is still taken in); revoke the token; collect strays. Returns stray pids found."""
        for name in ("gateway", "custodian", "kiosk", "app"):
            child = self.children.get(name)
            if child is not None:
                began = time.monotonic()
                code = child.stop()
                self.say(f"stopped {name} (exit {code}, {time.monotonic() - began:.1f} s)")
        if self.intake is not None:
            began = time.monotonic()
            self.intake.stop()
            self.say(f"stopped the airlock intake ({time.monotonic() - began:.1f} s)")
            self.intake = None
        if self.token_id is not None:
            try:
                from proxy.tokens import TokenStore

                store = TokenStore(self.config.db)
                try:
                    store.revoke(token_id=self.token_id, reason="safeshare up stopped")
                finally:
                    store.dispose()
            except Exception as exc:  # the database may be gone; the gateway is stopped anyway
                self.say(f"could not revoke token {self.token_id}: {exc}")
        self._reaper.stop()
        strays = reap_strays()
        state = read_state(self.config.home)
        if state is not None and state.get("pid") == os.getpid():
            (self.config.home / STATE_FILE).unlink(missing_ok=True)
        return strays


def _gateway_ready(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("listening on "):
            return line.split(" ", 2)[2].strip()
    return None


def _wait_http(url: str, timeout: float, child: Child) -> None:
    def still_running() -> None:
        if not child.running():
            raise ComponentFailed(f"{child.name} exited (log {child.log}):\n{child.tail()}")

    if not wait_for_http_ok(url, timeout, still_running):
        raise ComponentFailed(f"{url} did not answer within {timeout:.0f} s (log {child.log})")


def install_stop_signals(enclave: LocalEnclave) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: enclave.request_stop())


# ---- status and down ------------------------------------------------------------------------------------------

def status(home: Path) -> dict:
    """What runs from HOME: each component's pid and liveness, and whether the gateway and app answer."""
    state = read_state(home)
    if state is None:
        return {"home": str(home), "running": False, "components": {}}
    running = pid_alive(state.get("pid"))
    components = {}
    for name, info in (state.get("components") or {}).items():
        components[name] = {"pid": info.get("pid"), "alive": pid_alive(info.get("pid")), "log": info.get("log")}
    answers = {}
    review = state.get("review") or ""
    for name, url in (("gateway", f"{state.get('gateway', '').rstrip('/')}/healthz"), ("app", state.get("app")),
                      *((("custodian", review.removesuffix("/review") + "/healthz"),) if review else ())):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                answers[name] = response.status == 200
        except (OSError, ValueError):
            answers[name] = False
    for name, ok in answers.items():
        if name in components:
            components[name]["answers"] = ok
    healthy = running and all(c["alive"] for c in components.values()) and all(answers.values())
    return {"home": str(home), "running": running, "healthy": healthy, "pid": state.get("pid"),
            "started_at": state.get("started_at"), "gateway": state.get("gateway"), "app": state.get("app"),
            "release": state.get("release"), "recipient": state.get("recipient"), "token_id": state.get("token_id"),
            "review": state.get("review"), "components": components}


def down(home: Path, timeout: float = 60.0) -> bool:
    """Ask the `up` process of HOME to stop and wait until it has; False if nothing ran."""
    state = read_state(home)
    pid = state.get("pid") if state else None
    if not pid_alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not pid_alive(pid)
