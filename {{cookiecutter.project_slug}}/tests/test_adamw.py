"""The default optimizer (loop/adamw.py): torch's AdamW update, with its moving numbers sent to the device as one
tensor a step, and its state made before the first step. The same for both tasks: it runs in the text-classification
projects (tests/conftest.py).
"""

import json

import pytest
import torch
from conftest import python_code, run, spmd_env
from transformers import get_scheduler

from {{ cookiecutter.project_slug }}.loop.adamw import AdamW

SHAPES = [(6, 4), (4,), (3, 5)]


def stepped(optimizer_class, **options) -> list:
    """Weights after 12 steps of fixed gradients under a warm-up from 0 and a cosine decay; the second weight has no
    gradient on steps 3 and 4 (so its step count and bias corrections fall behind the others'). Two groups, as
    loop/optimizers.parameter_groups makes them: the last weight (a bias, say) not decayed."""
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(shape, generator=generator, requires_grad=True) for shape in SHAPES]
    groups = [{"params": weights[:2], "weight_decay": 0.01}, {"params": weights[2:], "weight_decay": 0.0}]
    optimizer = optimizer_class(groups, lr=1e-2, **options)
    schedule = get_scheduler("cosine", optimizer, num_warmup_steps=2, num_training_steps=12)
    for step in range(12):
        for index, weight in enumerate(weights):
            missing = index == 1 and step in (2, 3)
            weight.grad = None if missing else torch.randn(weight.shape, generator=generator)
        optimizer.step()
        schedule.step()
    return [weight.detach() for weight in weights]


@pytest.mark.machinery
@pytest.mark.compares("float32", "weights after 12 steps on the host: the project's AdamW against torch.optim.AdamW")
def test_the_update_is_torch_adamw_s_with_a_warm_up_from_0_and_skipped_weights():
    ours = stepped(AdamW)
    for foreach in (False, True):
        for mine, torch_s in zip(ours, stepped(torch.optim.AdamW, foreach=foreach), strict=True):
            torch.testing.assert_close(mine, torch_s, rtol=1e-6, atol=1e-7)
    # The tolerance sees a small change: torch's AdamW with beta1 0.89 instead of 0.9 is outside it.
    assert not torch.allclose(ours[0], stepped(torch.optim.AdamW, betas=(0.89, 0.999))[0], rtol=1e-6, atol=1e-7)


ONE_TRANSFER = """
import json, sys
import torch, torch_xla
import torch_xla.debug.metrics as met
from transformers import get_scheduler
from {{ cookiecutter.project_slug }}.loop.adamw import AdamW
from {{ cookiecutter.project_slug }}.xla import sharding

spmd = sys.argv[1] == "fsdp"
if spmd:
    mesh = sharding.start_spmd("fsdp")  # before the first device tensor
device = torch_xla.device()
weights = [torch.randn(shape).to(device) for shape in [(8, 4), (8,), (16, 3)]]
if spmd:
    for weight in weights:
        sharding.shard_first_dim(weight, mesh, "fsdp")
noise = [torch.randn(weight.shape).to(device) for weight in weights]
torch_xla.sync()
# The pretrained rate: below 2.98e-6, 1 - lr * weight_decay is 1.0 in float32 (a constant torch_xla would bake in).
# Two groups (loop/optimizers.parameter_groups), one of them not decayed: still one tensor sent a step.
optimizer = AdamW([{"params": weights[:2], "weight_decay": 0.01}, {"params": weights[2:], "weight_decay": 0.0}],
                  lr=2e-5)
schedule = get_scheduler("linear", optimizer, num_warmup_steps=1, num_training_steps=10)
optimizer.create_state()
torch_xla.sync()
rates, compiled, sent = [], [], []
for step in range(10):
    before = (met.counter_value("UncachedCompile") or 0, met.metric_data("TransferToDeviceTime")[0])
    for weight, extra in zip(weights, noise):
        weight.grad = weight * 0.5 + extra  # a gradient computed on the device: nothing sent
    rates.append(schedule.get_last_lr()[0])
    optimizer.step()
    schedule.step()
    torch_xla.sync()
    compiled.append((met.counter_value("UncachedCompile") or 0) - before[0])
    sent.append(met.metric_data("TransferToDeviceTime")[0] - before[1])
shards = [torch_xla._XLAC._get_xla_sharding_spec(optimizer.state[weight]["exp_avg"]) for weight in weights]
print(json.dumps({"rates": rates, "compiled": compiled, "sent": sent, "shards": shards,
                  "finite": all(bool(torch.isfinite(weight).all()) for weight in weights)}))
"""


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.parametrize("layout", ["data", "fsdp"])
def test_a_rate_from_0_to_0_is_one_graph_and_one_transfer_a_step(layout):
    """Warm-up from 0, a decay through rates where 1 - lr * weight_decay rounds to 1.0, and to 0: one graph (the
    first step is already the steady one: the state existed before it), and one tensor sent per step. Under SPMD
    the moments are sharded as their weights are."""
    result = run(python_code(ONE_TRANSFER, layout), env=spmd_env(4) if layout == "fsdp" else None, timeout=300)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["rates"][0] == 0.0 and min(found["rates"][1:]) < 2.98e-6 < max(found["rates"])
    assert found["compiled"] == [1] + [0] * 9
    # The first step also sends the constant scalars (0.5 above, 1 - beta1, 1 - beta2, eps) once: torch_xla keeps one
    # device copy of each value and reuses it.
    assert found["sent"] == [5] + [1] * 9
    assert found["finite"]
    if layout == "fsdp":
        assert found["shards"] == ["{devices=[4,1]0,1,2,3}", "{devices=[4]0,1,2,3}", "{devices=[4,1]0,1,2,3}"]
    else:
        assert found["shards"] == ["", "", ""]
