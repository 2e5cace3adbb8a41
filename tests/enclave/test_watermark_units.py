"""Issue 24, item 14 without a display: the recipient policy's `watermark` setting (on by default, strict), the stamp's
text, the tiled and dithered mask, and how the setting reaches the kiosk (its command line in a container and in
`safeshare up`, x11vnc's desktop name). The real screen is tested in test_watermark.py."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from deploy.plan import EnclaveSubnets, plan_enclave
from deploy.site.folder import Site
from enclave.kiosk.config import KioskConfig, KioskConfigError, watermark_settings
from enclave.kiosk.display import XDisplay
from enclave.kiosk.vnc import desktop_name, x11vnc_command
from enclave.kiosk.watermark import WatermarkSettings, text_block, tile_mask
from policies.recipient import PolicyError, RecipientPolicy, WatermarkPolicy, load_recipient_policy
from safeshare.cli import main

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 26, 10, 15, 42, tzinfo=timezone.utc)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipient.yaml"
    path.write_text(text)
    return path


def test_on_by_default_in_the_policy_and_the_kiosk(tmp_path: Path) -> None:
    policy = load_recipient_policy(write(tmp_path, "recipient: alice\n"))
    assert policy.watermark.enabled and policy.watermark == WatermarkPolicy()
    assert load_recipient_policy(REPO / "policies" / "examples" / "recipient-demo.yaml").watermark.enabled
    assert KioskConfig(app_url="http://127.0.0.1:1/", state_dir=tmp_path).watermark.enabled
    assert watermark_settings(None, None, None) == WatermarkSettings()
    settings = watermark_settings(write(tmp_path, "recipient: alice\nwatermark: {enabled: false}\n"), None, None)
    assert not settings.enabled and settings.recipient == "alice"


@pytest.mark.parametrize("setting, problem", [
    ("{colour: grey}", "colour"),
    ("{opacity: 0}", "opacity"),
    ("{opacity: 1.5}", "opacity"),
    ("{scale: 9}", "scale"),
    ("{text: 'no fields at all'}", "names none of"),
    ("{text: '{recipient} {password}'}", "{password} is not one of"),
    ("{text: '{time!r}'}", "no format spec"),
    ("{text: '{'}", "Single '{'"),
    ("{enabeld: false}", "enabeld"),  # strict: a misspelt switch is an error, never a watermark silently on or off
])
def test_a_bad_setting_is_an_error_naming_the_file_and_field(tmp_path: Path, setting: str, problem: str) -> None:
    path = write(tmp_path, f"recipient: alice\nwatermark: {setting}\n")
    with pytest.raises(PolicyError) as caught:
        load_recipient_policy(path)
    assert str(path) in str(caught.value) and "watermark" in str(caught.value) and problem in str(caught.value)


def test_the_stamp_text() -> None:
    settings = WatermarkSettings(recipient="alice\x1b[2Jbob")
    assert settings.lines("0a1b2c3d", NOW) == ["alice [2Jbob  kiosk 0a1b2c3d", "2026-11-26 10:15 UTC"]
    custom = WatermarkSettings.from_policy(WatermarkPolicy(text="{kiosk}|{time}|{recipient}"), None)
    assert custom.lines("k", NOW) == ["k|2026-11-26 10:15|recipient not given"]


def glyphs() -> np.ndarray:
    """A stand-in for two rendered lines of the 6x13 font (density like real text)."""
    rng = np.random.default_rng(1)
    return rng.random((13, 6 * 30)) < 0.2


def test_the_mask_is_tiled_sparse_and_dithered() -> None:
    lines = [glyphs(), glyphs()[:, :120]]
    block = text_block(lines, 2)
    assert block.shape == (2 * (13 + 3 + 13), 2 * 180)
    solid = tile_mask(block, 1280, 800, 1.0)
    half = tile_mask(block, 1280, 800, 0.5)
    assert (half <= solid).all() and 0.45 < half.sum() / solid.sum() < 0.55
    # screen-door: at 0.5 no two horizontally or vertically adjacent pixels are both drawn
    assert not (half[:, 1:] & half[:, :-1]).any() and not (half[1:] & half[:-1]).any()
    assert 0.005 < half.mean() < 0.03
    # every 100-pixel band of columns and of rows has some of it (rows shifted by half a step)
    assert all(half[:, x:x + 100].any() for x in range(0, 1280, 100))
    assert all(half[y:y + 100].any() for y in range(0, 800, 100))


def test_the_kiosk_announces_its_id_to_the_proxy(tmp_path: Path) -> None:
    display = XDisplay(proc=None, name=":9", xauthority=tmp_path / "x", cookie=b"c" * 16, width=800, height=600)
    cmd = x11vnc_command(display, tmp_path / "pw", port=5900, desktop=desktop_name("0a1b2c3d"))
    assert cmd[cmd.index("-desktop") + 1] == "safeshare kiosk 0a1b2c3d"


def test_provisioning_passes_the_policys_watermark_to_the_kiosk_container(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "site.json").write_text(json.dumps({"site_id": "abc123"}))
    site = Site(tmp_path / "site")
    policy = RecipientPolicy.model_validate({"recipient": "alice", "release": "adult-k5", "screen": "1280x800",
                                             "watermark": {"opacity": 0.25, "colour": "#d0d0d0"}})
    subnets = EnclaveSubnets(enclave="10.214.0.0/27", vnc="10.214.0.32/27")
    images = {"app": "a", "kiosk": "k", "gateway": "g"}
    command = list(plan_enclave(site, policy, site.releases / "adult" / "00aa", images, subnets).kiosk.command)
    assert command[command.index("--recipient") + 1] == "alice"
    passed = json.loads(command[command.index("--watermark") + 1])
    assert WatermarkPolicy.model_validate(passed) == policy.watermark
    off = policy.model_copy(update={"watermark": WatermarkPolicy(enabled=False)})
    command = list(plan_enclave(site, off, site.releases / "adult" / "00aa", images, subnets).kiosk.command)
    settings = watermark_settings(None, command[command.index("--recipient") + 1],
                                  command[command.index("--watermark") + 1])
    assert not settings.enabled


def test_safeshare_kiosk_refuses_a_bad_watermark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["kiosk", "--url", "http://127.0.0.1:1/", "--state", str(tmp_path / "state")]
    assert main([*base, "--watermark", '{"enabeld": false}']) == 2
    assert "--watermark" in capsys.readouterr().err
    assert main([*base, "--watermark", "not json"]) == 2
    assert main([*base, "--policy", str(write(tmp_path, "recipient: a\nwatermark: {opacity: 2}\n"))]) == 2
    assert "opacity" in capsys.readouterr().err
    with pytest.raises(KioskConfigError):
        watermark_settings(None, None, '{"scale": 0}')


class FakeOverlay:
    """Stands in for overlay.Overlay: records what the watermark asks of the window."""

    def __init__(self, window: int = 7, alive: bool = True) -> None:
        self.window, self.alive, self.width, self.height = window, alive, 64, 48
        self.shown = 0
        self.masks: list[np.ndarray] = []

    def exists(self) -> tuple[bool, bool]:
        return self.alive, self.alive

    def show(self) -> None:
        self.shown += 1

    def set_mask(self, mask: np.ndarray) -> None:
        self.masks.append(mask)


def top(window: int, viewable: bool = True, override: bool = True):
    from enclave.kiosk.xlib import TopLevel

    return TopLevel(window, viewable, override, 0, 0, 64, 48, "", "", "", None)


def test_keep_decides_on_one_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """On top: nothing. Below another window: raised. Unmapped: shown again, and said. A new minute: redrawn."""
    from enclave.kiosk import overlay as overlay_module
    from enclave.kiosk.watermark import Watermark

    monkeypatch.setattr(overlay_module, "render_text", lambda _conn, line: np.ones((13, 6 * len(line)), bool))
    clock = [NOW]
    watermark = Watermark(WatermarkSettings(recipient="a", scale=1), "0a1b2c3d", clock=lambda: clock[0])
    fake = watermark.overlay = FakeOverlay()
    watermark._draw(None, watermark.settings.lines("0a1b2c3d", NOW))
    assert watermark.keep(None, [top(1, override=False), top(7)]) == [] and fake.shown == 0 and len(fake.masks) == 1
    assert watermark.keep(None, [top(7), top(1, override=False)]) == [] and fake.shown == 1 and watermark.raises == 1
    notes = watermark.keep(None, [top(1, override=False), top(7, viewable=False)])
    assert fake.shown == 2 and watermark.redraws == 1 and "unmapped" in notes[0]
    clock[0] = NOW.replace(minute=16)
    watermark.keep(None, [top(1, override=False), top(7)])
    assert len(fake.masks) == 2 and watermark.lines[1] == "2026-11-26 10:16 UTC"
