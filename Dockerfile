# lakegate's container image: `make image` (wheels built on the host first, so this build needs
# no network: `make wheels`, then `podman build` or `docker build`).
#
#   BASE_IMAGE  a slim Python 3.11 base; `make base-image` builds a Debian one locally
#               (localhost/lakegate-base:bookworm) for machines without a registry
#
# Run: mount a tenants file at LAKEGATE_TENANTS_FILE and give the lake's keys, e.g.
#   podman run -p 9000:9000 -v ./tenants.toml:/etc/lakegate/tenants.toml:ro \
#     -e LAKEGATE_LAKE=http://minio:9000 -e LAKEGATE_LAKE_ACCESS_KEY=... \
#     -e LAKEGATE_LAKE_SECRET_KEY_FILE=/run/secrets/lake_secret_key IMAGE
ARG BASE_IMAGE=python:3.11-slim

# ---- build: a virtual environment from the wheels in build/wheels (no index, no compiler)
FROM ${BASE_IMAGE} AS build
LABEL org.opencontainers.image.title=lakegate
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
COPY build/wheels /wheels
RUN python3 -m venv /opt/lakegate \
 && /opt/lakegate/bin/pip install -q --no-index --find-links /wheels lakegate \
 && /opt/lakegate/bin/pip uninstall -q -y setuptools pip \
 && find /opt/lakegate -name __pycache__ -prune -exec rm -rf {} + \
 && /opt/lakegate/bin/python -m compileall -q -j 0 /opt/lakegate/lib >/dev/null

# ---- final: the base, the environment, a non-root user
FROM ${BASE_IMAGE}
# written as lines (a minimal Debian has no useradd); the uid is fixed for volume ownership
RUN echo 'lakegate:x:10001:10001:lakegate:/var/lib/lakegate:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'lakegate:x:10001:' >> /etc/group \
 && mkdir -p /var/cache/lakegate /var/lib/lakegate /etc/lakegate \
 && chown 10001:10001 /var/cache/lakegate /var/lib/lakegate
COPY --from=build /opt/lakegate /opt/lakegate
ENV PATH=/opt/lakegate/bin:/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin \
    PYTHONUNBUFFERED=1 \
    LAKEGATE_LISTEN=0.0.0.0:9000 \
    LAKEGATE_CACHE_DIR=/var/cache/lakegate \
    LAKEGATE_TENANTS_FILE=/etc/lakegate/tenants.toml
USER 10001:10001
WORKDIR /var/lib/lakegate
VOLUME ["/var/cache/lakegate"]
EXPOSE 9000
# liveness on the port LAKEGATE_LISTEN names (http; https when LAKEGATE_TLS_CERT is set)
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["python3", "-c", "import os, ssl, urllib.request as u; p = os.environ.get('LAKEGATE_LISTEN', '0.0.0.0:9000').rpartition(':')[2]; s = 'https' if os.environ.get('LAKEGATE_TLS_CERT') else 'http'; u.urlopen(f'{s}://127.0.0.1:{p}/_lakegate/health/live', timeout=4, context=ssl._create_unverified_context() if s == 'https' else None)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["lakegate", "serve"]
