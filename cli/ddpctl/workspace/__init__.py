"""The user's own code, shipped to the pods without rebuilding the image.

The folder ddpctl runs in (or `--workspace DIR`) is the user's code. `select` chooses its files as
git and Docker do (`.gitignore`, `.dockerignore`, the spec's excludes) and leaves likely secrets out
unless named; `pack` makes a deterministic .tar.gz of them, named by the sha256 of the uncompressed
tar. A small one travels as an immutable Secret in the job's namespace (`inline`); a larger one goes
to an object store, content-addressed (`upload`). In each pod, `ddpctl_trainer.workspace` fetches
it, checks the sha256 and unpacks it into an emptyDir before torchrun starts.

Standard library, pathspec (git's rules) and, for an object store only, obstore: no torch, no
kubernetes client, no spec (the caller passes what the spec says). Import what you use from its
module (`ddpctl.workspace.pack`, `.select`, ...): this package imports nothing, so `render` of a job
that ships no folder never loads the packer or pathspec.
"""
