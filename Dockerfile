# syntax=docker/dockerfile:1
# Build stage: compilers and build tools live here only. The full image has gcc and the
# Python headers, which the quota engine's mypyc build needs (scripts/build_compiled.py).
FROM python:3.11-bookworm AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY launch_agent ./launch_agent
COPY scripts/build_compiled.py ./scripts/
# The `validate` extra (kubernetes-validate's schemas): queue specs of core kinds (batch/v1 Job)
# are type-checked at load against them, as CRD kinds are against their CRDs.
# mypy compiles in a venv of its own, which the final stage does not copy; the check at the
# end fails the build if the interpreted engine would be loaded.
RUN python -m venv /opt/launch-agent \
    && /opt/launch-agent/bin/pip install --no-cache-dir '.[validate]' \
    && python -m venv /opt/mypyc \
    && /opt/mypyc/bin/pip install --no-cache-dir mypy==2.4.1 setuptools==84.2.1 \
    && /opt/mypyc/bin/python scripts/build_compiled.py --in-place \
       "$(/opt/launch-agent/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && /opt/launch-agent/bin/python -I -c \
       'import launch_agent.quota as q; assert q.engine_build() == "compiled", q.engine_build()'

# Final stage: the virtualenv, the Python runtime and the programs the agent runs, nothing else.
# git fetches the source of git-source runs it builds, ssh is git's transport for sshAuthSecrets
# (launch_agent/model/tools.py lists them; tests/unit/test_tools.py checks this line against it).
# The base image already has ca-certificates and /bin/sh (the chart's ca-bundle init container).
FROM python:3.11-slim-bookworm
ARG UID=10001
RUN apt-get update \
    && apt-get install -y --no-install-recommends git=1:2.39.* openssh-client=1:9.2p1-* \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid "${UID}" launch-agent \
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
