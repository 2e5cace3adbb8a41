# The gateway: noVNC, the WebSocket endpoint and the inspecting RFB proxy. Sessions are written to /sessions (a volume
# the kiosks never see); tokens and targets live in the database given by SAFESHARE_DB (SQLite in /data by default).
ARG BASE
FROM ${BASE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/safeshare \
 && /opt/safeshare/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels safeshare \
 && rm -rf /tmp/wheels \
 && useradd --system --uid 10002 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin safeshare \
 && mkdir -p /sessions /data && chown safeshare:safeshare /sessions /data
ENV PATH=/opt/safeshare/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 \
    SAFESHARE_DB=sqlite:////data/safeshare.db
USER safeshare
EXPOSE 6080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('SAFESHARE_HEALTH_URL', 'http://127.0.0.1:6080/healthz'), timeout=2)"]
ENTRYPOINT ["tini", "--", "safeshare", "gateway"]
CMD ["--listen", "0.0.0.0:6080", "--sessions", "/sessions"]
