# The runtime every service image starts from: BASE plus a virtualenv in /opt/safeshare with the project's pinned
# dependencies (the wheels in the build context's `deps/`, built on the host; nothing is downloaded here). The project
# itself is added by each service image, so that an edit of the sources rebuilds a small layer, not this one.
# BASE: safeshare/layer-base (built offline by `safeshare images build`) or any Debian bookworm image with python3,
# python3-venv and tini (a site with a registry: base.Dockerfile).
ARG BASE
FROM ${BASE} AS venv
COPY deps /wheels
# The test suites of the big scientific packages are dead weight (about 100 MB); nothing imports them at run time.
RUN python3 -m venv /opt/safeshare \
 && /opt/safeshare/bin/pip install --no-index --no-cache-dir --disable-pip-version-check --find-links /wheels \
      -r /wheels/requirements.txt \
 && for package in numpy pandas pyarrow scipy; do \
      find /opt/safeshare/lib/python3*/site-packages/$package -depth -type d -name tests -exec rm -rf {} +; \
    done
# Marks this stage's image, which nothing references after the build: `safeshare images build` prunes it.
LABEL org.safeshare.stage=venv

# A second stage, so that the wheels never become a layer of the image.
FROM ${BASE}
COPY --from=venv /opt/safeshare /opt/safeshare
ENV PATH=/opt/safeshare/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8
