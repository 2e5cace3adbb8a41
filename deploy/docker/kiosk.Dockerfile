# The kiosk: Xvfb, x11vnc (password from /secrets/vnc-password, clipboard off) and Chromium locked to the app. The
# supervisor writes the managed browser policy and starts Chromium as the unprivileged user safeshare-kiosk; the
# container network (an internal network shared with the app only) is what keeps the browser from anything else, and
# the refusing proxy of `--network proxy` stays on as a second line.
ARG BASE
FROM ${BASE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/safeshare \
 && /opt/safeshare/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels safeshare \
 && rm -rf /tmp/wheels \
 && useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin safeshare-kiosk \
 && mkdir -p /state /etc/chromium/policies/managed
ENV PATH=/opt/safeshare/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
EXPOSE 5900
# Healthy while Xvfb, x11vnc and Chromium all run (a probe connection to x11vnc would take the one VNC client slot).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import glob; names = {open(p).read().strip() for p in glob.glob('/proc/[0-9]*/comm')}; assert {'Xvfb', 'x11vnc', 'chromium'} <= names"]
ENTRYPOINT ["tini", "--", "safeshare", "kiosk"]
CMD ["--url", "http://app:8050/", "--state", "/state", "--network", "proxy", "--vnc-port", "5900", \
     "--vnc-listen", "0.0.0.0", "--vnc-password-file", "/secrets/vnc-password", "--app-title", "safeshare"]
