"""ddpctl_trainer.preflight.measure and run_checks on this CPU, in one process: the kernels time
and the checks run. (Across processes: tests/e2e/trainer/test_preflight_cli.py.)"""

from __future__ import annotations

from ddpctl_trainer.preflight import PreflightConfig

# ------------------------------------------------------------------------------------ measuring here


def test_the_kernels_and_the_checks_in_one_process() -> None:
    """The measuring code on this CPU without a process group: figures come out, nothing is judged
    against anyone (one node), no collective runs."""
    import torch

    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.preflight import measure, run_checks

    assert measure.gemm_dtype("cuda") == torch.bfloat16 and measure.gemm_dtype("cpu") == torch.float32
    op, dtype = measure.gemm(torch.device("cpu"), 64)
    bench = measure.Local(op, torch.device("cpu"), 0.02)
    bench.warm_up()
    windows = [bench.window() for _ in range(3)]
    assert bench.best is not None and bench.best.seconds == min(w.seconds for w in windows) > 0
    assert all(0.0 <= w.cpu_share <= 1.0 for w in windows) and dtype == "float32"
    config = PreflightConfig(gemm_n=64, window_s=0.02, repeats=2)
    report = run_checks(DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo", config)
    assert list(report.compute) == [0] and report.compute[0] > 0 and report.world is None
    assert report.findings == [] and report.exit_code == 0 and report.gemm_n == 64
