# The trainer image: torchrun of the ddpctl trainer (package ddpctl_trainer), run as a non-root user.
#
#   ddpctl build                                   # GPU base (below), tag = content hash of the context
#   ddpctl build --base-image ddpctl-base:cpu      # CPU base for kind / `ddpctl run --docker`
#                                                  # (made locally by scripts/make-base-image.sh)
#
# The base must bring Python 3.10+ and torch with torchrun on PATH. Only the trainer goes in the
# image (not the ddpctl CLI), and the dependency layer comes before the code, so editing the
# trainer rebuilds one small layer.
ARG BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${BASE_IMAGE}

# Extra Python packages for the trainer (torch comes with the base). tqdm draws the progress bar;
# pip does not reach the network when the base already satisfies them.
ARG PIP_PACKAGES="tqdm>=4.66"
# Checkpoints in object storage (--checkpoint-dir s3://, gs://, az://) need obstore, which no base
# brings: OBJECT_STORE=1 (any non-empty value) installs it from PyPI (the build then needs the
# network); the default image has none and builds offline.
ARG OBJECT_STORE=""
ARG OBJECT_STORE_PACKAGE="obstore==0.12.1"
ARG UID=1000
ARG GID=1000

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/opt/ddpctl \
    HOME=/workspace

# 1. Dependencies (cached until PIP_PACKAGES, OBJECT_STORE or the base change). Fail early on a base without
#    torch or torchrun, with a message instead of a broken image.
RUN python3 -c "import torch, torch.distributed.run" \
      || { echo "BASE_IMAGE needs python3 with torch (torchrun); e.g. make one: scripts/make-base-image.sh" >&2; exit 1; } \
 && command -v torchrun >/dev/null \
 && if [ -n "$PIP_PACKAGES" ]; then python3 -m pip install --quiet --break-system-packages $PIP_PACKAGES 2>/dev/null \
      || python3 -m pip install --quiet $PIP_PACKAGES; fi \
 && if [ -n "$OBJECT_STORE" ]; then python3 -m pip install --quiet --break-system-packages "$OBJECT_STORE_PACKAGE" 2>/dev/null \
      || python3 -m pip install --quiet "$OBJECT_STORE_PACKAGE"; fi

# 2. A numeric non-root user (runAsNonRoot in the restricted Pod Security profile checks the
#    image's numeric UID) with a writable home / working directory for ./checkpoints.
RUN (getent group "$GID" >/dev/null || echo "trainer:x:$GID:" >> /etc/group) \
 && (getent passwd "$UID" >/dev/null || echo "trainer:x:$UID:$GID:ddpctl trainer:/workspace:/usr/sbin/nologin" >> /etc/passwd) \
 && mkdir -p /workspace /opt/ddpctl \
 && chown "$UID:$GID" /workspace

# 3. The code: the trainer package, importable as ddpctl_trainer (the repo keeps it in trainer/ddpctl_trainer/).
#    Compiled here: the pod's root is read-only, so each start would compile it again.
COPY --chown=0:0 trainer/ddpctl_trainer/ /opt/ddpctl/ddpctl_trainer/
RUN python3 -m compileall -q /opt/ddpctl/ddpctl_trainer && python3 -c "import ddpctl_trainer.config"

USER ${UID}:${GID}
WORKDIR /workspace
# Layout comes from the PET_* env that each engine sets (ddpctl render / run --docker); the
# launcher is torchrun whose exit code keeps the reason (what the rendered pods run too).
CMD ["python3", "-m", "ddpctl_trainer.launch", "-m", "ddpctl_trainer"]
