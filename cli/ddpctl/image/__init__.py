"""The trainer image: `ddpctl build` (content-hash tags, the build context, the local engine)."""
