# The gateway: noVNC, the WebSocket endpoint and the inspecting RFB proxy. Sessions are written to /sessions (a volume
# the kiosks never see); tokens and targets live in the database given by SAFESHARE_DB (SQLite in /data by default).
# BASE: the runtime image (runtime.Dockerfile); noVNC's files are in /usr/share/novnc. No secret is baked in.
ARG BASE
FROM ${BASE}
# The same two steps in every service image (layers shared by the build cache): the project, then a dependency check.
COPY project /wheels
RUN /opt/safeshare/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check /wheels/*.whl \
 && /opt/safeshare/bin/pip check --disable-pip-version-check && rm -rf /wheels
RUN useradd --system --uid 10002 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin safeshare \
 && mkdir -p /sessions /data && chown safeshare:safeshare /sessions /data
ENV SAFESHARE_DB=sqlite:////data/safeshare.db
USER safeshare
EXPOSE 6080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('SAFESHARE_HEALTH_URL', 'http://127.0.0.1:6080/healthz'), timeout=2)"]
ENTRYPOINT ["tini", "--", "safeshare", "gateway"]
CMD ["--listen", "0.0.0.0:6080", "--sessions", "/sessions"]
