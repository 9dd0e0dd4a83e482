# One production image for every payorch process (api, worker, sweeper, migrate);
# docker-compose.yml builds it once (the migrate service) and picks each command.  The
# build context is the allow-list in .dockerignore.  Not built on the development machine
# (no Docker engine there); tests/integration/test_compose_files.py checks what it copies.
#
# Stages: `production` (the default target, the last stage below) holds orchestrator/ and
# workers/ only; `dev` adds devtools/ (the provider simulator and the demo), for the dev
# profile's provider-sim service.  The simulator never ships in the production image.
FROM python:3.11-slim AS production

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The runtime lock first (its own layer, rebuilt only when the lock changes): exactly the
# pinned versions, each file checked against its hash; then the project with --no-deps, so
# pyproject.toml's ranges never pull anything the lock does not name
# (docs/decisions/0084-hashed-lock-files.md).
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY workers ./workers
RUN pip install --no-deps . \
    && useradd --system --create-home --home-dir /home/payorch payorch

USER payorch
ENV PAYORCH_ENV=production
EXPOSE 8000
CMD ["payorch", "api", "--host", "0.0.0.0", "--port", "8000"]

FROM production AS dev
USER root
COPY devtools ./devtools
RUN pip install --no-deps .
USER payorch

# The default target: the production image, without devtools.
FROM production
