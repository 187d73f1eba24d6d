# syntax=docker/dockerfile:1
# fusedbench: the pinned build-and-benchmark environment, in two variants.
#
#   cuda (default)  NVIDIA CUDA devel base, torch's CUDA 13.0 build: GPU machines
#   cpu             Python slim base, torch's CPU build: machines and CI runners without a GPU
#
#   invoke docker.build [--variant cpu]      # build args below filled in from the lock and git
#   invoke docker.run bench --baseline all   # reports/ mounted; GPUs too where there are any
#   docker build --build-arg VARIANT=cpu --tag fusedbench:cpu .
#   docker run --rm -v "$PWD/reports:/reports" fusedbench:cpu bench --baseline all
#   docker run --rm --gpus all -v "$PWD/reports:/reports" IMAGE bench --baseline all
#
# Both variants share every step after their system stage: the same non-root
# user, the environment installed by scripts/create_env.sh (the script .ci/run
# and README use; FUSEDBENCH_TORCH_VARIANT picks requirements/<variant>.txt,
# installed with --require-hashes --no-deps), both builds, the entry point.
ARG VARIANT=cuda

# Base images by tag AND digest. No registry is reachable where this file was
# written, so no digest was checked against one; each is one that public
# projects pin for exactly this tag. Docker refuses a digest that does not
# match, so a wrong one fails the build instead of changing it. Names are
# short, as Docker writes them: buildah and podman find a local image of a short name, and pull
# one only where their registries.conf lists a search registry.
# CUDA 13.0 + cuDNN 9: what onnxruntime-gpu 1.31.1 and torch 2.13.0's CUDA wheel are built for.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG CUDA_IMAGE_DIGEST=sha256:8b2705ea7a8653ad3451b46ab835eced92d77b44e671b9cf3ad4f95fbb2efe5e
# Exactly the lock's Python (3.11.7) under /usr/local, on Debian 12: a venv of
# it is the environment, no conda needed. The official image is rebuilt under
# the same tag when Debian updates; this digest is one of its builds.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
ARG PYTHON_IMAGE_DIGEST=sha256:53d6284a40eae6b625f22870f5faba6c54f2a28db9027408f4dee111f1e885a2
# micromamba as the static binary from its own image: pinned by digest, no installer script.
ARG MICROMAMBA_IMAGE=mambaorg/micromamba:2.3.3
ARG MICROMAMBA_IMAGE_DIGEST=sha256:800e7ade3ffe29c9a9ac2026163131495f8197c3852e572c5835beb4e8a33cd6
# Distribution packages at exact versions. An apt pin fails the build when the
# distribution replaces the version with a security update: update it here then.
# Ubuntu 24.04 (cuda):
ARG GCC_VERSION=13.3.0-6ubuntu2~24.04.1
# Debian 12 (cpu, and the ORT headers stage of both):
ARG DEBIAN_GCC_VERSION=12.2.0-14+deb12u1
# Debian's g++ package: the `c++` command (g++-12), which tools and tests call by that name.
ARG DEBIAN_GXX_DEFAULT_VERSION=4:12.2.0-3
ARG NODEJS_VERSION=18.20.4+dfsg-1~deb12u3
ARG NPM_VERSION=9.2.0~ds1-1
ARG FUSEDBENCH_CACHE=/opt/fusedbench-cache

FROM ${MICROMAMBA_IMAGE}@${MICROMAMBA_IMAGE_DIGEST} AS micromamba

# --- stage: the ONNX Runtime headers ------------------------------------------
# The onnxruntime wheels ship no headers; env/builder/ort_headers.py fetches the pinned
# npm package and checks its sha256. npm is needed for that one download only,
# so it lives in this stage and never reaches the image. One stage for both
# variants: the headers do not depend on the base.
FROM ${PYTHON_IMAGE}@${PYTHON_IMAGE_DIGEST} AS ort-headers
ARG NODEJS_VERSION
ARG NPM_VERSION
ARG FUSEDBENCH_CACHE
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        nodejs="${NODEJS_VERSION}" \
        npm="${NPM_VERSION}" \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY env/ env/
RUN FUSEDBENCH_CACHE="${FUSEDBENCH_CACHE}" python3 -c \
        'from env.builder.ort_headers import ensure_ort_headers; print(ensure_ort_headers())'

# --- stage: the cuda variant's system -----------------------------------------
# A base of the final stage (FROM ${VARIANT}-system), which hadolint cannot follow
# through the variable: the labels are set there.
# hadolint ignore=DL3049
FROM ${CUDA_IMAGE}@${CUDA_IMAGE_DIGEST} AS cuda-system
ARG CUDA_IMAGE
ARG CUDA_IMAGE_DIGEST
ARG GCC_VERSION
ARG DEBIAN_FRONTEND=noninteractive
# The pinned system compiler: the C++ side of the op, nvcc's host compiler,
# and torch.compile (inductor compiles C++ and Triton launchers at run time,
# which is why the image keeps the devel base and its compiler).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        gcc-13="${GCC_VERSION}" \
        g++-13="${GCC_VERSION}" \
    && rm -rf /var/lib/apt/lists/*
# The default user of the Ubuntu 24.04 image holds uid 1000, which the host
# user often has too.
RUN if id ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi
COPY --from=micromamba /bin/micromamba /usr/local/bin/micromamba
# scripts/create_env.sh makes a conda env of the lock's exact builds when micromamba is present.
ENV CC=gcc-13 \
    CXX=g++-13 \
    CUDAHOSTCXX=g++-13 \
    MAMBA_ROOT_PREFIX=/opt/micromamba \
    FUSEDBENCH_BASE_IMAGE=${CUDA_IMAGE} \
    FUSEDBENCH_BASE_DIGEST=${CUDA_IMAGE_DIGEST}

# --- stage: the cpu variant's system ------------------------------------------
# No conda: scripts/create_env.sh makes a venv of the base's Python 3.11.7.
# A base of the final stage (FROM ${VARIANT}-system), which hadolint cannot follow
# through the variable: the labels are set there.
# hadolint ignore=DL3049
FROM ${PYTHON_IMAGE}@${PYTHON_IMAGE_DIGEST} AS cpu-system
ARG PYTHON_IMAGE
ARG PYTHON_IMAGE_DIGEST
ARG DEBIAN_GCC_VERSION
ARG DEBIAN_GXX_DEFAULT_VERSION
ARG DEBIAN_FRONTEND=noninteractive
# The pinned system compiler: the C++ side of the op and torch.compile's C++ code.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        gcc-12="${DEBIAN_GCC_VERSION}" \
        g++-12="${DEBIAN_GCC_VERSION}" \
        g++="${DEBIAN_GXX_DEFAULT_VERSION}" \
    && rm -rf /var/lib/apt/lists/*
ENV CC=gcc-12 \
    CXX=g++-12 \
    FUSEDBENCH_BASE_IMAGE=${PYTHON_IMAGE} \
    FUSEDBENCH_BASE_DIGEST=${PYTHON_IMAGE_DIGEST}

# --- the image: every step from here on is shared -------------------------------
FROM ${VARIANT}-system
ARG VARIANT
ARG FUSEDBENCH_CACHE
# Defaults equal the lock; `invoke docker.build` passes the lock's value, and a
# RUN step below fails the build if the two disagree (one source of truth:
# environment.lock.yml `variables:`).
ARG TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
# nvcc needs ~2 GiB per job; raise on a large build host.
ARG MAX_JOBS=4
# The pins' sha256 (of environment.lock.yml followed by requirements/<variant>.txt,
# as scripts/create_env.sh stamps them), for the labels; checked against the
# copied files when given.
ARG LOCK_SHA256=""
# The uid of the non-root user: `invoke docker.build` passes the host user's,
# so reports written to the mounted folder belong to them.
ARG FUSEDBENCH_UID=10001
# Where pip finds torch's CPU build (torch==2.13.0+cpu), which PyPI does not
# carry: PyTorch's own CPU index, or a folder of wheels mounted into the build.
# requirements/cpu.txt's sha256 checks the file wherever it comes from. The
# cuda variant's torch comes from PyPI.
ARG TORCH_FIND_LINKS=https://download.pytorch.org/whl/cpu/torch/

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN useradd --create-home --uid "${FUSEDBENCH_UID}" --shell /bin/bash fusedbench \
    && mkdir -p /opt/fusedbench /reports \
    && chown fusedbench:fusedbench /opt/fusedbench /reports

# FUSEDBENCH_CORE_VERSIONS=all: the image's libraries carry every kernel version. An image is built on one CPU
# and run on others, so a benchmark in it runs the libraries baked below (the loader picks the version per CPU)
# instead of rebuilding them for the running CPU's version alone in every container.
ENV FUSEDBENCH_ENV=/opt/fusedbench-env \
    FUSEDBENCH_CORE_VERSIONS=all \
    FUSEDBENCH_TORCH_VARIANT=${VARIANT} \
    FUSEDBENCH_CACHE=${FUSEDBENCH_CACHE} \
    FUSEDBENCH_REPORTS_DIR=/reports \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/fusedbench-env/bin:${PATH}

WORKDIR /opt/fusedbench

# 1. The environment, from the pins and the scripts that install them only,
# so a source change does not reinstall the wheels (env/lock: the drift
# check that ends create_env.sh, and the lock reader of the arch list check).
COPY environment.lock.yml ./
COPY requirements/ requirements/
COPY env/__init__.py env/paths.py env/
COPY env/lock/ env/lock/
COPY scripts/ scripts/
RUN pins=$(cat environment.lock.yml "requirements/${FUSEDBENCH_TORCH_VARIANT}.txt" | sha256sum | cut -d' ' -f1) \
    && if [ -n "${LOCK_SHA256}" ] && [ "${pins}" != "${LOCK_SHA256}" ]; then \
         echo "the copied pins hash to ${pins}, the build arg LOCK_SHA256 is ${LOCK_SHA256}" >&2; exit 1; \
       fi \
    && if [ "${FUSEDBENCH_TORCH_VARIANT}" = cpu ]; then export PIP_FIND_LINKS="${TORCH_FIND_LINKS}"; fi \
    && scripts/create_env.sh \
    && if command -v micromamba >/dev/null; then micromamba clean --all --yes; fi \
    && locked=$(python -c 'from env.lock.lockfile import read_lock; print(read_lock().variables["TORCH_CUDA_ARCH_LIST"])') \
    && if [ "${locked}" != "${TORCH_CUDA_ARCH_LIST}" ]; then \
         echo "TORCH_CUDA_ARCH_LIST build arg '${TORCH_CUDA_ARCH_LIST}' differs from the lock's '${locked}'" >&2; exit 1; \
       fi

ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \
    MAX_JOBS=${MAX_JOBS}

COPY --from=ort-headers --chown=fusedbench:fusedbench ${FUSEDBENCH_CACHE} ${FUSEDBENCH_CACHE}

# 2. The sources, then the builds as the runtime user, so the toolchain
# record (build/toolchain.json, build/*/build.log) is baked into the image
# and `bench`'s own pre-build finds everything up to date. Then the delivery:
# `invoke dist` builds the wheel (and the C++ package) and the environment
# installs that wheel (as root, who created it), so the image and pip users run
# the same artifact; `python -P` (the sources not on sys.path) imports the installed one.
COPY --chown=fusedbench:fusedbench . .
# Numeric, so `docker run --user`, Kubernetes' runAsNonRoot and the host agree.
USER ${FUSEDBENCH_UID}
RUN invoke build && invoke dist && invoke env.check
USER 0
RUN pip install --no-index dist/fusedbench-*.whl \
    && python -P -c 'import ops; print("installed ops:", ops.__file__, ops.ort_library_path())'
USER ${FUSEDBENCH_UID}

# The git commit, for the labels. Declared after the last RUN: a build argument
# is part of every later RUN step's cache key, and the commit changes each time.
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="fusedbench" \
      org.opencontainers.image.description="fused_norm torch/ONNX Runtime op: pinned build and benchmark environment" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.base.name="${FUSEDBENCH_BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${FUSEDBENCH_BASE_DIGEST}" \
      io.fusedbench.variant="${VARIANT}" \
      io.fusedbench.lock.sha256="${LOCK_SHA256}" \
      io.fusedbench.torch-cuda-arch-list="${TORCH_CUDA_ARCH_LIST}"

# Reports go to a mounted folder: docker run -v "$PWD/reports:/reports" ...
VOLUME ["/reports"]
ENTRYPOINT ["/opt/fusedbench/scripts/with_env.sh"]
CMD ["--list"]
