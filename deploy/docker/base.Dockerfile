# For sites WITH a registry and package mirror: a layer like the offline ones (deploy/images/rootfs.py), made with
# apt-get in a RUN step. `safeshare images build --base registry` uses it twice:
#   base  = FROM debian:bookworm-slim, PACKAGES = the base layer's packages (+ novnc for its static files)
#   kiosk = FROM the runtime image,    PACKAGES = the kiosk layer's packages
# The offline path (`safeshare images build`, the default) needs neither registry nor network in any build step.
ARG FROM=debian:bookworm-slim
FROM ${FROM}
ARG PACKAGES
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
