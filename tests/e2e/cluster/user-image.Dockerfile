# A user's image as our users make one: the ddpctl trainer image plus their own model code, here
# the misbehaving models of the stall tests (--model user_models:blocking). Built by the real-node
# tests with `ddpctl build --file tests/e2e/cluster/user-image.Dockerfile --context tests/support/models
# --base-image <trainer image>`.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY --chown=0:0 stall_models.py /opt/ddpctl/user_models.py
