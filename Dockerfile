# gang-extender: runs beside kube-scheduler in its pod (see manifests/base/deployment.yaml). `make image` builds it.
#
# BASE_IMAGE names a Python 3.11 image as your registry serves it (constraints.txt is resolved for 3.11);
# both stages use it, so the venv copied from the first finds the same interpreter in the second.
ARG BASE_IMAGE=python:3.11-slim

# ---- build: the package and its pinned dependencies, into a venv
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY extender ./extender
RUN /opt/venv/bin/pip install --constraint constraints.txt .

# ---- runtime: the venv, a non-root user, and the placement kernels compiled into the image
FROM ${BASE_IMAGE}
# NUMBA_CPU_NAME=generic: numba keys its cache on the CPU model, so kernels compiled for the build machine's
# CPU would be recompiled on every node with another one. Generic code is as fast here (bench: plan_gang at
# 15k and 100k nodes within noise of host-specific code) and loads on any x86-64 node.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/var/cache/numba \
    NUMBA_CPU_NAME=generic
# uid 10001 is manifests/base/deployment.yaml's runAsUser. numba must be able to write (lock) its cache
# directory even to load from it, so the kernels are compiled into /opt/gang-extender/kernels and the pod's
# init container copies them into a writable emptyDir at $NUMBA_CACHE_DIR (the root filesystem read-only);
# the image's own $NUMBA_CACHE_DIR holds a copy too, for a plain `docker run`.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin extender \
 && mkdir -p "$NUMBA_CACHE_DIR" /opt/gang-extender/kernels \
 && chown 10001 "$NUMBA_CACHE_DIR" /opt/gang-extender/kernels
COPY --from=build /opt/venv /opt/venv
USER 10001
# Compile every placement kernel now, as the runtime user and against the files this image ships, so a
# new pod is ready in ~0.5 s instead of compiling for ~10 s; then copy them as the init container does and
# prove a fresh process loads every kernel from the copy.
RUN NUMBA_CACHE_DIR=/opt/gang-extender/kernels \
    python -c "from extender.placement.api import warm_up; print(f'kernels compiled in {warm_up():.2f}s')" \
 && cp -a /opt/gang-extender/kernels/. "$NUMBA_CACHE_DIR"/ \
 && python -c "from extender.placement import api, kernels; api.warm_up(); \
stats = [f.stats for f in vars(kernels).values() if hasattr(f, 'stats')]; \
assert stats and not any(s.cache_misses for s in stats) and any(s.cache_hits for s in stats), stats; \
print(f'{len(stats)} kernels load from the cache')"
EXPOSE 8888 8889
ENTRYPOINT ["gang-extender"]
CMD ["serve", "--in-cluster", "true", "--host", "127.0.0.1", "--port", "8888"]
