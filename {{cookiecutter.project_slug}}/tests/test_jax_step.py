"""The whole training step as one JAX function (xla/jax_step.py) against the lazy step (loop/step.py), on XLA:CPU.

Each check runs in a fresh process (torch_xla's runtime and SPMD are chosen once per process). The models are tiny
transformers models built from their config classes (one layer, 32 wide): a BERT classifier and a Qwen2 language
model, both in every check, so that the checks run once, in the causal-LM project of the data layout (the
shortest suite: `machinery("causal-lm")`; the whole runs of both tasks and layouts with --step_function jax are
tests/test_step_function.py's).
"""

import json

import pytest
from comparing import BF16_RESOLUTION, float32_apart, relative
from conftest import python_code, run, spmd_env

pytestmark = [pytest.mark.machinery("causal-lm"), pytest.mark.slow]

COMMON = """
import json, sys
from types import SimpleNamespace
import torch, torch_xla
import torch_xla.debug.metrics as met
from transformers import BertConfig, BertForSequenceClassification, Qwen2Config, Qwen2ForCausalLM, get_scheduler
from {{ cookiecutter.project_slug }}.loop.adamw import AdamW
from {{ cookiecutter.project_slug }}.loop.optimizers import parameter_groups
from {{ cookiecutter.project_slug }}.loop.step import StepParts, train_step
from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly
from {{ cookiecutter.project_slug }}.xla.jax_step import WholeStep

SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
             max_position_embeddings=32)


def build(arch, dropout=0.0):
    torch.manual_seed(0)
    if arch == "bert":
        model = BertForSequenceClassification(BertConfig(**SHAPE, hidden_dropout_prob=dropout,
                                                         attention_probs_dropout_prob=dropout))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPE, num_key_value_heads=2, attention_dropout=dropout))
    return make_graph_friendly(model)


def batches(arch, count, device, size=4, length=16):
    generator = torch.Generator().manual_seed(1)
    found = []
    for _ in range(count):
        ids = torch.randint(0, 64, (size, length), generator=generator)  # token 0 (BERT's pad) among them
        labels = torch.randint(0, 2, (size,), generator=generator) if arch == "bert" else ids.clone()
        found.append({"input_ids": ids, "attention_mask": torch.ones(size, length, dtype=torch.int64), "labels": labels})
    return [{key: value.to(device) for key, value in batch.items()} for batch in found]


def counts():
    return met.counter_value("UncachedCompile") or 0, (met.metric_data("TensorsGraphSize") or (0,))[0]


def train(arch, whole, steps=10, lr=1e-3, dropout=0.0, model=None, max_norm=1.0, mesh=None):
    device = torch_xla.device()
    model = (model or build(arch, dropout)).to(device).train()
    optimizer = AdamW(parameter_groups(model, 0.01), lr=lr)  # the run's groups: biases and norms not decayed
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=2, num_training_steps=steps)
    optimizer.create_state()
    data = batches(arch, steps, device)
    if mesh is not None:  # every batch split along its first dimension, as the fsdp layout's loader does
        from {{ cookiecutter.project_slug }}.xla import sharding
        for batch in data:
            for value in batch.values():
                sharding.shard_first_dim(value, mesh, "fsdp")
    torch_xla.sync()
    step = WholeStep(model, optimizer, max_norm) if whole else None
    accelerator = SimpleNamespace(backward=lambda loss: loss.backward())
    clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    losses, norms, compiled, graphs = [], [], [], []
    for batch in data:
        before = counts()
        if whole:
            loss, norm = step(batch)
            scheduler.step()
        else:
            loss, norm = train_step(accelerator, StepParts(model, optimizer, scheduler, clip), batch)
        torch_xla.sync()
        after = counts()
        compiled.append(after[0] - before[0])
        graphs.append(after[1] - before[1])
        losses.append(loss)
        norms.append(norm)
    weights = {name: p.detach().cpu() for name, p in model.named_parameters()}
    return {"losses": [loss.item() for loss in losses], "norms": [norm.item() for norm in norms],
            "compiled": compiled, "graphs": graphs, "traced": len(step.callable._cache) if whole else None}, weights, model, optimizer
"""

EQUIVALENCE = COMMON + """
arch = sys.argv[1]
lazy, lazy_weights, _, _ = train(arch, whole=False)
whole, whole_weights, _, optimizer = train(arch, whole=True)
# Each tensor's difference and norm.
differences = {name: [float((lazy_weights[name] - whole_weights[name]).norm()), float(lazy_weights[name].norm())]
               for name in lazy_weights}
steps = sorted({int(state["step"]) for state in optimizer.state.values()})
print(json.dumps({"lazy": lazy, "whole": whole, "differences": differences, "steps": steps}))
"""


_RUNS = {}  # arch -> the lazy and the whole step's runs, once per module (the fsdp test compares with BERT's)


def equivalence_run(arch: str) -> dict:
    if arch not in _RUNS:
        result = run(python_code(EQUIVALENCE, arch), timeout=600)
        _RUNS[arch] = json.loads(result.stdout.strip().splitlines()[-1])
    return _RUNS[arch]


@pytest.fixture(scope="module", params=["bert", "qwen2"])
def equivalence(request):
    return request.param, equivalence_run(request.param)


@pytest.mark.xla
@pytest.mark.compares("float32", "losses, gradient norms and weights after 10 steps: the JAX step against the lazy "
                      "step")
def test_the_whole_step_trains_as_the_lazy_step(equivalence):
    """float32, no dropout, clip 1.0, a linear schedule: the same losses, norms and weights after 10 steps, within
    float32's bound for two programs over 10 steps (tests/comparing.py: 7.6e-5).

    The weights: all of them together (about 1e-7 measured), and each tensor against its own norm (zero-initialised
    biases, whose norm is only what 10 steps moved them, measured up to 1.0e-6). Key biases
    are left out: softmax ignores a shift shared by every key, so their gradient is 0 up to rounding, and AdamW
    divides that rounding noise by its own size (both steps move them by noise: 0.1-1.5 of their norm measured).
    """
    arch, found = equivalence
    lazy, whole = found["lazy"], found["whole"]
    assert len(whole["losses"]) == 10 and found["steps"] == [10]
    apart = float32_apart(10)
    for a, b in zip(lazy["losses"] + lazy["norms"], whole["losses"] + whole["norms"], strict=True):
        assert relative(b, a) <= apart, (arch, lazy, whole)
    assert lazy["losses"][-1] != lazy["losses"][0]
    noise = {name for name in found["differences"] if ".key.bias" in name or "k_proj.bias" in name}
    assert noise, arch
    kept = {name: pair for name, pair in found["differences"].items() if name not in noise}
    assert sum(d * d for d, _ in kept.values()) ** 0.5 <= apart * sum(n * n for _, n in kept.values()) ** 0.5
    worst = max((d / n, name) for name, (d, n) in kept.items())
    assert worst[0] <= apart, worst


@pytest.mark.xla
def test_the_whole_step_compiles_once_and_runs_no_more_graphs_than_the_lazy_step(equivalence):
    _, found = equivalence
    lazy, whole = found["lazy"], found["whole"]
    assert whole["compiled"][1:] == [0] * 9 and lazy["compiled"][1:] == [0] * 9
    assert max(whole["graphs"]) <= min(lazy["graphs"])
    assert whole["traced"] == 1  # one JAX trace for all ten steps


DROPOUT = COMMON + """
device = torch_xla.device()
model = build("bert", dropout=0.1).to(device).train()
optimizer = AdamW(model.parameters(), lr=0.0, weight_decay=0.0)  # the weights never change
batch = batches("bert", 1, device)[0]


def losses(seed, calls=3):
    torch.manual_seed(seed)  # what set_seed does at a run's start
    for state in optimizer.state.values():
        state["step"].zero_()  # a new run's optimizer
    step = WholeStep(model, optimizer, 1.0)
    found = [step(batch)[0] for _ in range(calls)]
    torch_xla.sync()
    return [loss.item() for loss in found]


first, again, other = losses(5), losses(5), losses(6)
with torch.no_grad():
    model.eval()
    plain = model(**batch).loss.item()
print(json.dumps({"first": first, "again": again, "other": other, "plain": plain}))
"""


@pytest.mark.xla
@pytest.mark.compares("bit for bit", "dropout's losses: the same function and seed run again")
def test_dropout_draws_a_new_mask_each_step_and_the_same_masks_from_the_same_seed():
    """BERT with dropout 0.1 at a learning rate of 0 (the same weights every call): each call's loss differs from
    the last's and from the loss without dropout; a new run with the same torch seed repeats them exactly."""
    found = json.loads(run(python_code(DROPOUT), timeout=600).stdout.strip().splitlines()[-1])
    first = found["first"]
    assert len(set(first)) == 3 and found["plain"] not in first
    assert found["again"] == first
    assert not set(found["other"]) & set(first)


CHECKPOINTED = COMMON + """
import jax
from {{ cookiecutter.project_slug }}.models.modeling import enable_gradient_checkpointing

arch = sys.argv[1]
recomputed = []
checkpoint = jax.checkpoint
jax.checkpoint = lambda function, **options: recomputed.append(1) or checkpoint(function, **options)
SHAPE["num_hidden_layers"] = 2
found = {}
for checkpointed in (False, True):
    model = build(arch, dropout=0.1)
    if checkpointed:
        enable_gradient_checkpointing(model)  # transformers' switch and torch_xla's checkpoint, as the run sets them
    torch.manual_seed(3)  # the dropout masks' seed (jax_step.py)
    found[checkpointed], _, _, _ = train(arch, whole=True, steps=5, model=model)
# The layers as one scan (what benchmarks/measure_compile_time.py compiles), dropout off: the same step.
from torch_xla.core.xla_builder import JaxCallable
from {{ cookiecutter.project_slug }}.xla import jax_step
whole_step = jax_step.WholeStep.__init__
def scanned(self, model, *args, **kwargs):
    whole_step(self, model, *args, **kwargs)
    self.callable = JaxCallable(jax_step.step_function(model, self.trainable, scan_layers=True))
plain, _, _, _ = train(arch, whole=True, steps=5)
jax_step.WholeStep.__init__ = scanned
scan, _, _, _ = train(arch, whole=True, steps=5)
print(json.dumps({"plain": found[False], "checkpointed": found[True], "recomputed": len(recomputed),
                  "unscanned": plain, "scanned": scan}))
"""


@pytest.mark.xla
@pytest.mark.parametrize("arch", ["bert", "qwen2"])
@pytest.mark.compares("float32", "losses and gradient norms of 5 steps: each layer under jax.checkpoint, and the "
                      "layers as one scan, against the step as written")
def test_gradient_checkpointing_and_a_layer_scan_compute_the_step_as_written(arch):
    """--gradient_checkpointing in the JAX step: each of the 2 layers runs under jax.checkpoint (its activations
    recomputed in the backward pass), and with dropout on the 5 steps' losses and norms are those of the step without
    it: the recomputation draws the forward's masks, and the forward draws the masks it draws unchecked. The layers
    as one scan (the compile-time benchmark's step) give the same losses and norms, dropout off. Each is another
    program than the step as written: within float32's bound for 5 steps."""
    found = json.loads(run(python_code(CHECKPOINTED, arch), timeout=600).stdout.strip().splitlines()[-1])
    assert found["recomputed"] == 2, found
    plain, checkpointed = found["plain"], found["checkpointed"]
    assert plain["losses"][0] != plain["losses"][-1]
    apart = float32_apart(5)
    for a, b in zip(plain["losses"] + plain["norms"], checkpointed["losses"] + checkpointed["norms"], strict=True):
        assert relative(b, a) <= apart, (plain, checkpointed)
    # The same module's step with its 2 layers as one scan over their stacked weights (no dropout): the same numbers.
    unscanned, scanned = found["unscanned"], found["scanned"]
    for a, b in zip(unscanned["losses"] + unscanned["norms"], scanned["losses"] + scanned["norms"], strict=True):
        assert relative(b, a) <= apart, (unscanned, scanned)


ACCUMULATED = COMMON + """
import contextlib
arch = sys.argv[1]
device = torch_xla.device()
data = batches(arch, 5, device, size=16)
found = {}
for name, whole, accumulation in (("lazy", False, 4), ("whole", True, 4), ("one-batch", True, 1)):
    model = build(arch).to(device).train()
    optimizer = AdamW(parameter_groups(model, 0.01), lr=1e-3)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=2, num_training_steps=5)
    optimizer.create_state()
    step = WholeStep(model, optimizer, 1.0, accumulation=accumulation) if whole else None
    accelerator = SimpleNamespace(backward=lambda loss: loss.backward(), no_sync=lambda model: contextlib.nullcontext())
    clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    parts = StepParts(model, optimizer, scheduler, clip, accumulation, step)
    results = [train_step(accelerator, parts, dict(batch)) for batch in data]
    torch_xla.sync()
    found[name] = {"losses": [r.loss.item() for r in results], "norms": [r.grad_norm.item() for r in results],
                   "weights": {key: p.detach().cpu() for key, p in model.named_parameters()}}
start = {key: p.detach() for key, p in build(arch).named_parameters()}
def apart(a, b):
    return max(float((a[key] - b[key]).abs().max()) for key in a)
print(json.dumps({name: {"losses": run["losses"], "norms": run["norms"], "moved": apart(run["weights"], start),
                         "from_lazy": apart(run["weights"], found["lazy"]["weights"])} for name, run in found.items()}))
"""


@pytest.mark.xla
@pytest.mark.parametrize("arch", ["bert", "qwen2"])
@pytest.mark.compares("float32", "losses, gradient norms and weights of 5 steps: accumulation inside the JAX step "
                      "against the lazy step's, and against one batch of 16")
def test_gradient_accumulation_inside_the_function_trains_as_the_lazy_step_and_as_one_batch(arch):
    """--gradient_accumulation_steps 4 in the JAX step (a scan over the micro-batches inside the function) against the
    lazy step's accumulation of the same 4 micro-batches of 4, and against one batch of 16 without accumulation:
    float32, no dropout, 5 steps: three programs, the same losses and norms within float32's bound for 5 steps
    (relative), and the same weights within it (the largest difference, absolute: the weights are about 1)."""
    found = json.loads(run(python_code(ACCUMULATED, arch), timeout=600).stdout.strip().splitlines()[-1])
    lazy, apart = found["lazy"], float32_apart(5)
    assert lazy["moved"] > 10 * apart  # the weights moved (about 65 times the bound): a comparison that could fail
    for name in ("whole", "one-batch"):
        for a, b in zip(lazy["losses"] + lazy["norms"], found[name]["losses"] + found[name]["norms"], strict=True):
            assert relative(b, a) <= apart, (name, lazy, found[name])
        assert found[name]["from_lazy"] <= apart, (name, found[name]["from_lazy"])


LORA = COMMON + """
from peft import LoraConfig, TaskType, get_peft_model

arch = sys.argv[1]
targets = ["query", "value"] if arch == "bert" else ["q_proj", "v_proj"]
task = TaskType.SEQ_CLS if arch == "bert" else TaskType.CAUSAL_LM
model = get_peft_model(build(arch), LoraConfig(task_type=task, r=4, lora_alpha=8, target_modules=targets))
before = {name: p.detach().clone() for name, p in model.named_parameters()}
device = torch_xla.device()
model.to(device).train()
optimizer = AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
optimizer.create_state()
batch = batches(arch, 1, device)[0]
step = WholeStep(model, optimizer, 1.0)
losses = [step(batch)[0] for _ in range(6)]
torch_xla.sync()
after = {name: p.detach().cpu() for name, p in model.named_parameters()}
trainable = {name for name, p in model.named_parameters() if p.requires_grad}
print(json.dumps({
    "losses": [loss.item() for loss in losses],
    "changed": sorted(name for name in after if not torch.equal(after[name], before[name])),
    "trainable": sorted(trainable), "frozen": len(after) - len(trainable),
}))
"""


@pytest.mark.xla
@pytest.mark.parametrize("arch", ["bert", "qwen2"])
def test_lora_moves_only_the_adapters(arch):
    """peft LoRA (r 4 on the query and value projections): every trainable tensor moves, every frozen one stays
    bit-identical, and each of six steps on one batch at a high rate lowers its loss."""
    found = json.loads(run(python_code(LORA, arch), timeout=600).stdout.strip().splitlines()[-1])
    assert found["changed"] == found["trainable"] and found["frozen"] > len(found["trainable"])
    assert all("lora_" in name or "classifier" in name for name in found["trainable"])
    losses = found["losses"]
    assert all(later < earlier for earlier, later in zip(losses[:-1], losses[1:], strict=True)), losses


BF16 = COMMON + """
import re
from {{ cookiecutter.project_slug }}.precision.levels import PrecisionReport, apply_to_model


def dots(tensors):
    # Every dot of the pending graph (the JAX function's body comes in as a called computation), by element type.
    text = torch_xla._XLAC._get_xla_tensors_hlo(tensors)
    found = re.findall(r"= (\\w+)\\[[^\\]]*\\][^=]* dot\\(", text)
    return {"bf16": found.count("bf16"), "all": len(found)}


arch, device = sys.argv[1], torch_xla.device()
report = PrecisionReport("bf16", "bf16", "autocast", "", autocast=True)
found = {}
for whole in (False, True):
    model = apply_to_model(build(arch), report, device).to(device).train()
    optimizer = AdamW(model.parameters(), lr=1e-3)
    optimizer.create_state()
    batch = batches(arch, 1, device)[0]
    torch_xla.sync()
    if whole:
        loss, _ = WholeStep(model, optimizer, 1.0, autocast_dtype=torch.bfloat16)(batch)
    else:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    found["whole" if whole else "lazy"] = {**dots([loss, *model.parameters()]), "loss": loss.item()}
    found["wrapped"] = "_original_forward" in vars(model)  # the autocast wrap is still there after the step
print(json.dumps(found))
"""


@pytest.mark.xla
@pytest.mark.parametrize("arch", ["bert", "qwen2"])
@pytest.mark.compares("bf16", "the first step's loss under bf16 autocast: the JAX step against the lazy step")
def test_bf16_autocast_reaches_inside_the_jax_function(arch):
    """The forward wrapped in torch.autocast by precision.apply_to_model: the step runs the original forward under
    torchax's autocast, and its graph has as many bf16 dots as the lazy autocast step's (measured: all 30 of 30 in
    both, forward and backward, for either model), and about its loss (the same float32 softmax and loss, from bf16
    dots: two programs, within bf16's resolution)."""
    found = json.loads(run(python_code(BF16, arch), timeout=600).stdout.strip().splitlines()[-1])
    lazy, whole = found["lazy"], found["whole"]
    print(arch, "bf16 dots of all dots: lazy", lazy, "whole", whole)
    assert lazy["bf16"] > 0 and whole["bf16"] == lazy["bf16"] and whole["all"] == lazy["all"]
    assert found["wrapped"]
    assert whole["loss"] == pytest.approx(lazy["loss"], rel=BF16_RESOLUTION)


FSDP = COMMON + """
from {{ cookiecutter.project_slug }}.parallel.fsdp_wrapping import wrap_model
from {{ cookiecutter.project_slug }}.xla import sharding

mesh = sharding.start_spmd("fsdp")
if sys.argv[1] == "fsdp":
    model = wrap_model(build("bert"), mesh, None, False)  # FSDPv2 around each layer and the whole model
else:  # the data layout over SPMD (parallel/data_spmd.py): the whole model on every device
    model = build("bert").to(torch_xla.device())


def specs(tensors):
    return [torch_xla._XLAC._get_xla_sharding_spec(tensor) for tensor in tensors]


before = specs(model.parameters())
found, _, _, optimizer = train("bert", whole=True, model=model, mesh=mesh)
moments = [optimizer.state[p] for p in model.parameters()]
print(json.dumps({**found, "before": before, "after": specs(model.parameters()),
                  "exp_avg": specs([m["exp_avg"] for m in moments]), "exp_avg_sq": specs([m["exp_avg_sq"] for m in moments])}))
"""


@pytest.mark.xla
@pytest.mark.parametrize("layout", ["fsdp", "data"])
@pytest.mark.compares("float32", "losses and gradient norms of 10 steps: 4 SPMD devices (fsdp, data) against one")
def test_both_layouts_keep_every_sharding_and_train_as_one_device(layout):
    """4 SPMD CPU devices, each batch split over them. fsdp (FSDPv2's wrapping): every weight sharded before the step
    keeps its sharding after ten steps. data over SPMD (parallel/data_spmd.py): every weight replicated, before and
    after. In both AdamW's moments are laid out as their weights, and the losses and norms are one device's (the
    BERT run of the equivalence fixture: same init, batches and schedule) within float32's bound for two programs over
    10 steps: under data the
    partitioner's all-reduce averages the gradients that several processes could not (config/step_function.py)."""
    one_device = equivalence_run("bert")
    found = json.loads(run(python_code(FSDP, layout), env=spmd_env(4), timeout=600).stdout.strip().splitlines()[-1])
    if layout == "fsdp":
        assert sum("devices=[4" in spec for spec in found["before"]) >= len(found["before"]) // 2, found["before"]
    else:
        assert set(found["after"]) == {"{replicated}"}, set(found["after"])
    assert found["after"] == found["exp_avg"] == found["exp_avg_sq"]
    assert layout == "data" or found["after"] == found["before"]
    assert found["compiled"][1:] == [0] * 9
    single = one_device["whole"]
    for a, b in zip(single["losses"] + single["norms"], found["losses"] + found["norms"], strict=True):
        assert relative(b, a) <= float32_apart(10), (single, found)
