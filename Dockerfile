# Tollgate gateway: `tollgate serve` on port 4000.
#   docker build -t tollgate .
#   docker run -p 4000:4000 -v tollgate-data:/data -e TOLLGATE_ADMIN_KEY=... \
#              -e OPENAI_API_KEY=... tollgate
# SQLite lives on the /data volume by default; for several replicas point them all at one
# PostgreSQL: -e TOLLGATE_DATABASE_URL=postgresql://user:pass@host:5432/tollgate
# Mount your own config over /app/config.yaml (or pass --config) to change the pool.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# CPU torch first and pinned: resolving sentence-transformers' torch requirement from PyPI
# would pull the multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

COPY pyproject.toml README.md ./
COPY router_core ./router_core
COPY gateway ./gateway
COPY migrations ./migrations
RUN pip install .

COPY config.yaml ./config.yaml

RUN useradd --create-home --uid 1000 tollgate && mkdir -p /data && chown tollgate /data
USER tollgate

ENV TOLLGATE_DATABASE_URL=sqlite:////data/tollgate.db \
    TOLLGATE_CACHE_DIR=/data/cache \
    TOLLGATE_SPOOL_DIR=/data/spool \
    HF_HUB_OFFLINE=1
VOLUME ["/data"]
EXPOSE 4000

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4000/health', timeout=4)"

CMD ["tollgate", "serve", "--host", "0.0.0.0", "--port", "4000", "--config", "/app/config.yaml"]
