# syntax=docker/dockerfile:1
# Two stages: build a wheel of this project, its per-record path the Rust crate in native/ (one abi3 extension
# module), into a venv whose dependencies come from requirements.lock (pinned, hash-checked); then ship only that
# venv on the slim image of the same Python release (the builder's full image has the C linker).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG BUILDER_IMAGE=python:3.11.14-bookworm

FROM ${BUILDER_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# The builder's own Rust tool chain, the official image's, pinned like the Python one.
COPY --from=rust:1.95.0-slim-bookworm /usr/local/rustup /usr/local/rustup
COPY --from=rust:1.95.0-slim-bookworm /usr/local/cargo /usr/local/cargo
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
# The runtime dependencies go into the shipped venv, the build's Python tools (setuptools-rust) into the builder's
# Python. Every file is a pinned wheel with a known hash.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: --no-deps -r requirements.lock \
 && python -m pip install --no-cache-dir --require-hashes --only-binary=:all: --no-deps -r requirements-build.lock
COPY pyproject.toml setup.py README.md ./
COPY native ./native
COPY worker ./worker
# The crate's dependencies are the versions native/Cargo.lock pins (cargo checks their hashes). The check runs the
# installed package, not the sources in /src (-P: the working directory is not on the path): its conversion core
# must be the native module.
RUN HARNESS_AGUI_NATIVE=1 python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps /wheels/*.whl \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/python -P -c "from worker._native import describe, native; assert native(), describe()" \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
ARG VERSION=0.3.0
LABEL org.opencontainers.image.title="harness-agui-worker" \
      org.opencontainers.image.description="Exactly-once Kafka worker: Harness event streams to AG-UI events" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/harness-agui/harness-agui-worker" \
      org.opencontainers.image.url="https://github.com/harness-agui/harness-agui-worker" \
      org.opencontainers.image.documentation="https://github.com/harness-agui/harness-agui-worker#readme" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 worker \
 && useradd --system --uid 10001 --gid worker --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin worker
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WORKER_METRICS_PORT=9464
USER 10001:10001
EXPOSE 9464
ENTRYPOINT ["python", "-m", "worker"]
CMD ["run"]
