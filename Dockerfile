# Production image: one image for every role (web, worker, one-shot migrate); compose.yaml wires them up.
# Real Postgres and Redis/Valkey come from DATABASE_URL / REDIS_URL (the embedded servers are for ./run and ./test).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system tarakan \
 && useradd --system --gid tarakan --home-dir /srv/tarakan --no-create-home --shell /usr/sbin/nologin tarakan

WORKDIR /srv/tarakan

# Packages first, so a code-only change reuses the dependency layer.
COPY pyproject.toml ./
COPY app ./app
COPY jobs ./jobs
RUN pip install .

# Templates, static files and migrations are read from beside the `app` package (app/templating.py and
# app/migrate.py resolve them from the source tree), so the app runs from here rather than from site-packages.
COPY alembic.ini ./
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
ENV PYTHONPATH=/srv/tarakan
# The bulk exports (docs/operations.md "Bulk export"): compose mounts one volume here in web and worker; an empty
# named volume takes this folder's owner, so the unprivileged user can write it.
RUN mkdir -p /srv/tarakan/exports && chown tarakan:tarakan /srv/tarakan/exports
ENV EXPORT_DIR=/srv/tarakan/exports

USER tarakan
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["tarakan", "serve", "--host", "0.0.0.0"]
