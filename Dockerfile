# syntax=docker/dockerfile:1
# One image for the agent and the scaler: `gpuscale agent …` (DaemonSet) and `gpuscale scaler …` (Deployment).
# NVML comes from the host driver, injected by the NVIDIA container toolkit or a RuntimeClass; AMD SMI from
# the `amd` extra where the ROCm libraries are present. Build and push for amd64 and arm64 GPU nodes
# (docs/install.md, "The image"):
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/gpuscale:VERSION --push .

# --- build: a wheel of gpuscale and of every dependency ---------------------------------------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --wheel-dir /wheels ".[nvidia]"

# --- run ----------------------------------------------------------------------------------------------------
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "gpuscale[nvidia]" \
 && groupadd --gid 65532 gpuscale \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin gpuscale
USER 65532:65532
# agent: gRPC 6000, metrics 9400; scaler: gRPC 6001, metrics 9401
EXPOSE 6000 6001 9400 9401
ENTRYPOINT ["gpuscale"]
CMD ["--help"]
