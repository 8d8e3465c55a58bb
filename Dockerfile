# syntax=docker/dockerfile:1
# The service image, built where there is internet and carried into the room.
# Python packages come only from the wheelhouse (cluster/wheelhouse.sh), never from an index.
# Layers run slowest-changing first: system, Python dependencies, app code, then the weights,
# so a new model version ships as one layer.
#
# The default target is the GPU image: both GPU engines, `vlm` (transformers) and `vllm` (the official
# vllm==0.32.0 wheel), from cluster/requirements-gpu.txt; --build-arg REQUIREMENTS=requirements-cpu.txt
# makes a CPU-only image.
#
#   cluster/wheelhouse.sh wheelhouse --set gpu --torch-index https://download.pytorch.org/whl/cu124
#   docker build --build-arg VERSION=1.2.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) \
#     --build-arg MODEL_NAME=got-ocr2 --build-arg WEIGHTS_DIGEST=$(sha256sum models/got-ocr2/weights.sha256 | cut -c1-64) \
#     -t registry.local/ocr:1.2.0 .
ARG BASE_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04

FROM ${BASE_IMAGE} AS system
ENV DEBIAN_FRONTEND=noninteractive
# Versions come from the base image's release snapshot; pinning them breaks builds when the mirror moves on.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv libglib2.0-0 curl ca-certificates tini \
       redis-server libseccomp2 \
       tesseract-ocr tesseract-ocr-script-frak tesseract-ocr-deu tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/* \
    && python3.11 -m venv /opt/venv \
    && useradd --create-home --uid 10001 ocr

FROM system AS dependencies
ARG REQUIREMENTS=requirements-gpu.txt
COPY cluster/requirements-cpu.txt cluster/requirements-gpu.txt /tmp/requirements/
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse -r "/tmp/requirements/${REQUIREMENTS}"

FROM dependencies AS service
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps /wheelhouse/offline_ocr_serve-*.whl \
    && /opt/venv/bin/python -m app.tools.structure_models /wheelhouse/structure/*.whl
COPY --chmod=0755 cluster/entrypoint.sh /usr/local/bin/ocr-entrypoint
COPY --chmod=0644 cluster/ray-auth.sh cluster/ray-tls.sh /usr/local/bin/
# The fleet's job store runs from this image too (KubeRay's StatefulSet ocr-redis): Debian's redis-server.
COPY --chmod=0755 cluster/redis-node.sh /usr/local/bin/ocr-redis
COPY serve_config.yaml /etc/ocr/serve_config.yaml

FROM service AS final
ARG MODEL_NAME=got-ocr2
COPY --chown=ocr:ocr models/${MODEL_NAME} /models/${MODEL_NAME}

ARG VERSION=0.0.0-dev
ARG GIT_COMMIT=unknown
ARG BUILD_DATE=unknown
ARG CUDA_VERSION=12.4
ARG WEIGHTS_DIGEST=unknown
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      ocr.cuda.version="${CUDA_VERSION}" \
      ocr.model.name="${MODEL_NAME}" \
      ocr.model.weights_digest="${WEIGHTS_DIGEST}"

ENV PATH=/opt/venv/bin:${PATH} \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    RAY_USAGE_STATS_ENABLED=0 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    CUDA_DEVICE_ORDER=PCI_BUS_ID \
    RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=app.http.proxy_guard:middlewares \
    PYTHONUNBUFFERED=1

# Secrets are mounted at run time, never built in: /etc/ocr/secrets/api_keys (API key digests,
# serve_config.yaml auth.api_keys_file), /etc/ocr/secrets/ray_auth_token (mode 0600, the Ray token),
# /etc/ocr/secrets/redis_password, and the fleet's TLS files in /etc/ocr/tls (cluster/make-tls.sh).
USER 10001
WORKDIR /home/ocr
EXPOSE 8000 6379 8265
# Liveness only: weights of several GB take minutes to load and verify, so give them time.
# The API is https; this probe stays inside the container, so it need not check the certificate's names.
HEALTHCHECK --start-period=600s --interval=30s --timeout=10s --retries=3 \
    CMD ["sh", "-c", "curl -fsSk https://127.0.0.1:8000/healthz || exit 1"]
ENTRYPOINT ["tini", "--", "ocr-entrypoint"]
CMD ["standalone"]
