# The kiosk: Xvfb, x11vnc (password from /secrets/vnc-password, clipboard off) and Chromium locked to the app.
# BASE: the runtime image plus the kiosk layer (Xvfb, x11vnc, Chromium, fonts). No secret is baked in.
#
# The supervisor (`safeshare kiosk`, with Xvfb and x11vnc) runs as root: it writes the managed browser policy into
# /etc/chromium/policies/managed (the app's address is known only at start) and starts Chromium, the one program the
# researcher drives, as the unprivileged user safeshare-kiosk (setpriv): the browser can then neither rewrite its
# policy nor signal its supervisor, Xvfb or x11vnc. The container network (an internal network shared with the app
# only) is what keeps the browser from anything else; the refusing proxy of `--network proxy` stays on as a second
# line. Docker's seccomp profile refuses user namespaces, so Chromium's own sandbox is off in a container.
ARG BASE
FROM ${BASE}
# The same two steps in every service image (layers shared by the build cache): the project, then a dependency check.
COPY project /wheels
RUN /opt/safeshare/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check /wheels/*.whl \
 && /opt/safeshare/bin/pip check --disable-pip-version-check && rm -rf /wheels
RUN useradd --system --uid 10003 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      safeshare-kiosk \
 && mkdir -p /state /etc/chromium/policies/managed
EXPOSE 5900
# Healthy while Xvfb, x11vnc and Chromium all run (a probe connection to x11vnc would take the one VNC client slot).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import glob; names = {open(p).read().strip() for p in glob.glob('/proc/[0-9]*/comm')}; assert {'Xvfb', 'x11vnc', 'chromium'} <= names"]
ENTRYPOINT ["tini", "--", "safeshare", "kiosk"]
CMD ["--url", "http://app:8050/", "--state", "/state", "--network", "proxy", "--vnc-port", "5900", \
     "--vnc-listen", "0.0.0.0", "--vnc-password-file", "/secrets/vnc-password", "--app-title", "safeshare"]
