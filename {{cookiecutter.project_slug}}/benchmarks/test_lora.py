"""LoRA against full fine-tuning on the demo: optimizer state per device, steady step time, graphs.

Each run in its own forked process (isolation.py), one after the other. On the demo's tiny model the adapters
save little compute (the frozen base still runs forward and backward); what they save is optimizer state and
checkpoint bytes, which this row shows.
"""

import pytest

from . import isolation
from .measure_lora import LORA_R, demo_run


@pytest.mark.benchmark(group="lora")
def test_lora_against_full_fine_tuning(benchmark, profile, tmp_path):
    full = isolation.run(demo_run, profile, str(tmp_path / "full"), None)
    lora = benchmark.pedantic(isolation.run, args=(demo_run, profile, str(tmp_path / "lora"), LORA_R),
                              rounds=1, iterations=1)
    benchmark.extra_info.update(
        headline="optimizer_bytes_lora_over_full", lora_r=LORA_R, device=lora["device"],
        optimizer_bytes_per_device_full=full["optimizer_bytes_per_device"],
        optimizer_bytes_per_device_lora=lora["optimizer_bytes_per_device"],
        optimizer_bytes_lora_over_full=lora["optimizer_bytes_per_device"] / full["optimizer_bytes_per_device"],
        trainable_parameters_lora=lora["trainable_parameters"], total_parameters_lora=lora["total_parameters"],
        steady_step_s_full=full["steady_step_s"], steady_step_s_lora=lora["steady_step_s"],
        compilations_full=full["compilations"], compilations_lora=lora["compilations"],
        eval_loss_full=full["eval_loss"], eval_loss_lora=lora["eval_loss"],
    )
    assert lora["compilations"] == full["compilations"] == 2  # the adapters add no graph
    assert lora["recompilations"] == full["recompilations"] == 0
    assert lora["optimizer_bytes_per_device"] < full["optimizer_bytes_per_device"] / 10
