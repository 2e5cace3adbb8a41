"""The enclave's kiosk: a locked-down Chromium on the analytics app, on a virtual display served over VNC.

    from enclave.kiosk import Kiosk, KioskConfig
    endpoint = await Kiosk(KioskConfig(app_url="http://127.0.0.1:8000/", state_dir=Path("state"))).start()
    # endpoint.upstream ("unix:PATH") and endpoint.password_file are what the RFB proxy connects with

Modules, one job each: `config` (inputs), `display` (Xvfb with a cookie), `vnc` (x11vnc), `browser_policy` (managed
policy JSON), `browser` (Chromium command and user), `netns` and `forward` (the browser reaches only the app),
`watchdog` (one fullscreen window), `xlib` (the X calls the watchdog needs), `kiosk` (start and stop in order),
`cli` (`safeshare kiosk`).
"""
from enclave.kiosk.config import KioskConfig, KioskConfigError
from enclave.kiosk.kiosk import Kiosk, KioskEndpoint

__all__ = ["Kiosk", "KioskConfig", "KioskConfigError", "KioskEndpoint"]
