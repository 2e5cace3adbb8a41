# The analytics app: serves exactly one sealed release, mounted read-only at /release.
# BASE: safeshare/base (built offline by `safeshare images build`) or any Debian bookworm image with the packages of
# deploy/images/rootfs.py's BASE layer (a site with a registry: see base.Dockerfile).
ARG BASE
FROM ${BASE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/safeshare \
 && /opt/safeshare/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels safeshare \
 && rm -rf /tmp/wheels \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin safeshare \
 && mkdir -p /state && chown safeshare:safeshare /state
ENV PATH=/opt/safeshare/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
USER safeshare
EXPOSE 8050
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8050/', timeout=2)"]
ENTRYPOINT ["tini", "--", "safeshare", "app"]
CMD ["--bundle", "/release", "--state", "/state", "--host", "0.0.0.0", "--port", "8050"]
