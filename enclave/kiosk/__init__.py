"""The enclave's kiosk: a locked-down Chromium on the analytics app, on a virtual display served over VNC.

    from enclave.kiosk import Kiosk, KioskConfig
    endpoint = await Kiosk(KioskConfig(app_url="http://127.0.0.1:8000/", state_dir=Path("state"))).start()
    # endpoint.upstream ("unix:PATH") and endpoint.password_file are what the RFB proxy connects with

Modules, one job each: `config` (inputs), `display` (Xvfb with a cookie), `keyboard` (no key acts on the X
server), `vnc` (x11vnc), `browser_policy` (managed policy JSON), `browser` (Chromium command, user and profile),
`netns` and `forward` (the browser reaches only the app), `watchdog` (one fullscreen window on the app), `watermark`
and `overlay` (who and when, stamped over the screen), `xlib` (the X calls the kiosk needs), `kiosk` (start and
stop in order), `cli` (`safeshare kiosk`).
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """Kiosk and KioskEndpoint load libX11 (ctypes), and the configuration the recipient-policy model: imported on
    first use, so that `safeshare` starts fast and runs in images without X (the app's and the gateway's) where the
    kiosk's command is registered but never used."""
    if name in ("Kiosk", "KioskEndpoint"):
        from enclave.kiosk import kiosk

        return getattr(kiosk, name)
    if name in ("KioskConfig", "KioskConfigError"):
        from enclave.kiosk import config

        return getattr(config, name)
    raise AttributeError(name)


__all__ = ["Kiosk", "KioskConfig", "KioskConfigError", "KioskEndpoint"]
