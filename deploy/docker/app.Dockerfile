# The analytics app: serves exactly one sealed release, mounted read-only (compose and provisioning choose where).
# BASE: the runtime image (runtime.Dockerfile: /opt/safeshare with the dependencies). No secret is baked in.
ARG BASE
FROM ${BASE}
# The same two steps in every service image (layers shared by the build cache): the project, then a dependency check.
COPY project /wheels
RUN /opt/safeshare/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check /wheels/*.whl \
 && /opt/safeshare/bin/pip check --disable-pip-version-check && rm -rf /wheels
RUN useradd --system --uid 10001 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin safeshare \
 && mkdir -p /state && chown safeshare:safeshare /state
USER safeshare
EXPOSE 8050
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8050/', timeout=2)"]
ENTRYPOINT ["tini", "--", "safeshare", "app"]
CMD ["--bundle", "/release", "--state", "/state", "--host", "0.0.0.0", "--port", "8050"]
