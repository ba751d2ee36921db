# syntax=docker/dockerfile:1
# Build stage: compilers and build tools live here only.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY launch_agent ./launch_agent
RUN python -m venv /opt/launch-agent \
    && /opt/launch-agent/bin/pip install --no-cache-dir .

# Final stage: the virtualenv and the Python runtime, nothing else.
FROM python:3.11-slim-bookworm
ARG UID=10001
RUN groupadd --system --gid "${UID}" launch-agent \
    && useradd --system --uid "${UID}" --gid launch-agent --home-dir /home/launch-agent \
       --create-home --shell /usr/sbin/nologin launch-agent
COPY --from=build /opt/launch-agent /opt/launch-agent
ENV PATH=/opt/launch-agent/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/launch-agent \
    LAUNCH_AGENT_QUEUE_SPECS_DIR=/etc/launch-agent/queue-specs
WORKDIR /home/launch-agent
USER 10001:10001
# /healthz, /readyz and /metrics
EXPOSE 8080
ENTRYPOINT ["launch-agent"]
CMD ["run"]
