"""FSDPv2 over 1, 2 and 4 devices: the same training (global batch 16), its parameters and optimizer state sharded.

Each device count is a fresh process (`CPU_NUM_DEVICES`, SPMD is chosen before the runtime starts) running the
project's own command line with `--parallelism fsdp`; the numbers are read from its report. On XLA:CPU the
"devices" share the same two cores, so the step time shows what sharding costs here, not what a TPU gains.
"""

import pytest

from .project_runs import run_project

GLOBAL_BATCH = 16
DEVICE_COUNTS = (1, 2, 4)


def fsdp_run(devices: int, profile, output) -> dict:
    per_device = str(GLOBAL_BATCH // devices)
    return run_project(
        output, "--parallelism", "fsdp", "--demo", "true", "--train_batch_size", per_device,
        "--eval_batch_size", per_device, "--max_seq_length", str(profile.max_seq_length),
        "--num_epochs", str(profile.compare_epochs), "--max_train_examples", str(profile.compare_train_examples),
        "--mixed_precision", "no", "--checkpoint", "false", "--export", "false", devices=devices,
    )


REPORTS = {}  # devices -> report, for the comparisons with fewer devices (the parametrized runs go 1, 2, 4)


@pytest.mark.benchmark(group="fsdp: devices")
@pytest.mark.parametrize("devices", DEVICE_COUNTS)
@pytest.mark.compares("float32", "eval loss of the quick profile's run: FSDPv2 over 2 and 4 devices against one")
def test_fsdp_devices(benchmark, profile, tmp_path, devices):
    report = benchmark.pedantic(fsdp_run, args=(devices, profile, tmp_path / "outputs"), rounds=1, iterations=1)
    REPORTS[devices] = report
    layout = report["layout"]
    held = layout["parameter_bytes_per_device"] + layout["optimizer_bytes_per_device"]
    whole = layout["parameter_bytes"] + layout["optimizer_bytes"]
    benchmark.extra_info.update(
        headline="state_bytes_per_device", devices=devices, per_device_batch=GLOBAL_BATCH // devices,
        steady_step_s=report["steady_step_seconds"], compilations=report["xla_compilations"],
        compile_seconds=report["compile_seconds"], parameter_bytes_per_device=layout["parameter_bytes_per_device"],
        optimizer_bytes_per_device=layout["optimizer_bytes_per_device"], state_bytes_per_device=held,
        state_bytes_vs_whole=held / whole, eval_loss=report["eval_loss"], device=report["device"],
        optimizer_steps=report["learning_rate"]["optimizer_steps"],
    )
    assert layout["mesh"] == {"fsdp": devices}
    assert sum(layout["parameter_bytes_by_device"]) == layout["parameter_bytes"]  # each element on one device
    assert held < whole / devices * 1.01  # each device holds its share, nothing more
    if devices > 1 and 1 in REPORTS:
        assert report["xla_compilations"] == REPORTS[1]["xla_compilations"]  # sharding adds no graph
        # The same training, in another program: within float32's bound for its steps (2**-17 a step, relative:
        # tests/comparing.py).
        one = REPORTS[1]
        assert abs(report["eval_loss"] - one["eval_loss"]) <= 2.0 ** -17 * one["learning_rate"]["optimizer_steps"] * (
            one["eval_loss"])
