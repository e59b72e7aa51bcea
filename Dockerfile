# One image, both servers: `brain-store serve` (default) or `brain-connector serve`.
# BASE_IMAGE: any image with Python 3.11+ (with venv) and useradd; tests/image builds one from
# Debian packages, e.g. `docker build --build-arg BASE_IMAGE=brain-store-base:bookworm .`.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY common ./common
COPY store ./store
COPY connector ./connector
COPY contract ./contract
COPY cli ./cli
RUN python3 -m venv /opt/brain \
 && /opt/brain/bin/pip install --no-cache-dir -r requirements.lock \
 && /opt/brain/bin/pip install --no-cache-dir --no-deps .

FROM ${BASE_IMAGE}
COPY --from=build /opt/brain /opt/brain
# /data (store) and /state (connector) exist and belong to the unprivileged user, so a fresh
# named volume mounted there (docker-compose.yml) starts with that owner and mode.
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin brain \
 && mkdir -p /data /state && chown brain:brain /data /state && chmod 0700 /data /state
ENV PATH=/opt/brain/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STORE_DATA_DIR=/data \
    STORE_HOST=0.0.0.0 \
    CONNECTOR_STATE_DIR=/state \
    CONNECTOR_HOST=0.0.0.0
USER brain
VOLUME ["/data", "/state"]
EXPOSE 8787 8788
CMD ["brain-store", "serve"]
