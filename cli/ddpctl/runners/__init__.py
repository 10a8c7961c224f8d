"""How a job runs on this machine: torchrun agents as local processes (`run --local`) or
Docker containers (`run --docker`), supervised and restarted as the target's rules say."""
