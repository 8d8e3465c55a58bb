# Service image. The offline delivery pipeline (wheelhouse-only installs, weights layer,
# labels, bundle/verify tooling) is built out under cluster/; this is the plain image.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    PYTHONUNBUFFERED=1

WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-cache-dir . && useradd --create-home ocr
USER ocr

EXPOSE 8000
HEALTHCHECK --start-period=120s --interval=30s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=5)"
CMD ["python", "-m", "app", "--host", "0.0.0.0", "--port", "8000"]
