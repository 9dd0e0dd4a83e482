# One image for every payorch process (api, worker, sweeper, migrate, provider-sim);
# docker-compose.yml picks the command.  Not built on the development machine (no Docker
# engine there): kept correct by reading, see README "Production stack".
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY workers ./workers
RUN pip install . \
    && useradd --system --create-home --home-dir /home/payorch payorch

USER payorch
ENV PAYORCH_ENV=production
EXPOSE 8000
CMD ["payorch", "api", "--host", "0.0.0.0", "--port", "8000"]
