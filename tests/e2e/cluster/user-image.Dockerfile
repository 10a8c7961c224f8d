# A user's image as our users make one: the ddpctl trainer image plus their own code, here the
# misbehaving models of the stall tests (--model user_models:blocking) and the tests' fault
# plugin (--callback test_faults:Faults, tests/support/models/faults.py: it holds or kills a rank
# at a step). The product image has no test hooks; the restart tests run this one. Built by the
# real-node and docker tests (and bench/bench_real_node.py) with `ddpctl build --file
# tests/e2e/cluster/user-image.Dockerfile --context tests/support/models --base-image <trainer image>`.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY --chown=0:0 stall_models.py /opt/ddpctl/user_models.py
COPY --chown=0:0 faults.py /opt/ddpctl/test_faults.py
# ... and a project as most teams build one: a WORKDIR of its own and `COPY . .`, so `--script
# train.py` (tests/support/models/train.py) runs /app/train.py (tests/e2e/cluster/test_user_image.py).
# The folder is the image user's, as the trainer's /workspace is: the built-in trainer's ./checkpoints
# lands there in the tests that run it from this image.
USER 0
RUN mkdir -p /app && chown 1000:1000 /app
WORKDIR /app
COPY --chown=0:0 . .
USER 1000:1000
