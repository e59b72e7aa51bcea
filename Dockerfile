# One image, both servers: `brain-store serve` (default) or `brain-connector serve`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY common ./common
COPY store ./store
COPY connector ./connector
COPY contract ./contract
COPY cli ./cli
RUN python -m venv /opt/brain \
 && /opt/brain/bin/pip install --no-cache-dir -r requirements.lock \
 && /opt/brain/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim
COPY --from=build /opt/brain /opt/brain
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin brain \
 && mkdir -p /data && chown brain:brain /data && chmod 0700 /data
ENV PATH=/opt/brain/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STORE_DATA_DIR=/data \
    STORE_HOST=0.0.0.0 \
    CONNECTOR_HOST=0.0.0.0
USER brain
VOLUME ["/data"]
EXPOSE 8787 8788
CMD ["brain-store", "serve"]
