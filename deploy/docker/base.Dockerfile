# For sites WITH a registry: the same base as the offline build (deploy/images/rootfs.py), from debian:bookworm-slim.
#   docker build -f deploy/docker/base.Dockerfile --build-arg PACKAGES="..." -t safeshare/base:site .
# The offline path (`safeshare images build`) needs no registry and is what tests and the README use.
ARG FROM=debian:bookworm-slim
FROM ${FROM}
ARG PACKAGES="python3 python3-venv ca-certificates tini novnc iproute2"
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
