# The shipshape image: the controller (`shipshape controller`), the per-node notice poller
# (`shipshape node-notices`) and the backend (`shipshape backend`, `shipshape worker`,
# `shipshape admin migrate`: deploy/backend/) run from it. Build: `docker build -t shipshape:0.1.0 .`
#
# Two stages: the builder makes wheels of the package and its pinned dependencies and installs them
# into a virtual environment; the final image gets that environment alone (no pip cache, no build
# tools, no dev extras, no compilers). It runs as a numeric non-root user and writes nothing outside
# /tmp, so it runs with a read-only root filesystem (mount an emptyDir on /tmp).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Metadata first: the dependency wheels stay cached while only the source changes.
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN python -m pip wheel --wheel-dir /wheels . \
 && python -m venv /opt/shipshape \
 && /opt/shipshape/bin/pip install --no-index --find-links /wheels shipshape \
 && /opt/shipshape/bin/pip uninstall -y pip \
 && find /opt/shipshape -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/shipshape/bin/python -m compileall -q -j 0 /opt/shipshape/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="shipshape" \
      org.opencontainers.image.description="Spot placement controller, node notice poller and backend for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/shipshape /opt/shipshape
# HOME and the caches point at /tmp: the root filesystem may be read-only.
ENV PATH=/opt/shipshape/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# 65532: the conventional "nonroot" uid/gid; numeric so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["shipshape"]
CMD ["--help"]
