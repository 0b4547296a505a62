"""Evaluation as one JAX function (xla/jax_eval.py) against the lazy evaluation (loop/evaluation.py), with the bake's
task's own eval_batch, in float32, on one XLA device and on 4 SPMD devices with the batches split as the layouts'
loaders split them (under the fsdp bakes the model wrapped in FSDPv2): each of the four main bakes checks its task in
its layout.

The models are tiny transformers models built from their config classes (a BERT classifier, a Qwen2 language model),
the weights the same in both evaluations; three batches, the last with masked copies (valid 0).
"""

import json

import pytest
from comparing import float32_apart
from conftest import TASK, python_code, run, spmd_env

EVALUATIONS = """
import json, sys
from types import SimpleNamespace
import torch, torch_xla
import torch_xla.debug.metrics as met
from transformers import BertConfig, BertForSequenceClassification, Qwen2Config, Qwen2ForCausalLM
from {{ cookiecutter.project_slug }}.data.batching import VALID
from {{ cookiecutter.project_slug }}.loop.evaluation import evaluate
from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly
from {{ cookiecutter.project_slug }}.tasks import task
from {{ cookiecutter.project_slug }}.xla import sharding
from {{ cookiecutter.project_slug }}.xla.jax_eval import WholeEval

devices = int(sys.argv[1])
mesh = sharding.start_spmd("fsdp") if devices > 1 else None  # before any device tensor
SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=64,
             max_position_embeddings=32)
torch.manual_seed(0)
if task.NAME == "causal-lm":
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPE, num_key_value_heads=2))
else:
    model = BertForSequenceClassification(BertConfig(**SHAPE))
device = torch_xla.device()
model = make_graph_friendly(model)
if mesh is not None and "{{ cookiecutter.parallelism }}" == "fsdp":  # FSDPv2 around each layer and the whole model
    from {{ cookiecutter.project_slug }}.parallel.fsdp_wrapping import wrap_model
    model = wrap_model(model, mesh, None, False)
model = model.to(device).eval()


def batches():
    generator = torch.Generator().manual_seed(1)
    found = []
    for index in range(3):
        ids = torch.randint(1, 64, (8, 16), generator=generator)
        labels = ids.clone() if task.NAME == "causal-lm" else torch.randint(0, 2, (8,), generator=generator)
        valid = torch.ones(8, dtype=torch.int64) if index < 2 else torch.tensor([1, 1, 1, 0, 0, 0, 0, 0])
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels, VALID: valid}
        batch = {name: value.to(device) for name, value in batch.items()}
        if mesh is not None:
            for value in batch.values():
                sharding.shard_first_dim(value, mesh, "fsdp")
        found.append(batch)
    return found


accelerator = SimpleNamespace(device=device, num_processes=1)
results, graphs = {}, {}
for name, whole in (("lazy", None), ("jax", WholeEval(model, task.eval_batch, torch.float32))):  # lazy: float32
    for round in range(2):  # the second evaluation compiles nothing
        before = met.counter_value("UncachedCompile") or 0
        results[name] = evaluate(accelerator, model, batches(), whole)
        graphs[f"{name}-{round}"] = (met.counter_value("UncachedCompile") or 0) - before
print(json.dumps({"results": results, "graphs": graphs}, default=lambda value: value.tolist()))
"""


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 4])
@pytest.mark.compares("float32", "eval metrics of 3 batches: the JAX evaluation against the lazy one, on 1 and 4 "
                      "SPMD devices")
def test_the_jax_evaluation_gives_the_lazy_one_s_metrics_in_no_more_graphs(devices):
    """The same metrics within float32's bound for one forward (two programs: tests/comparing.py; counts exactly),
    from no more graphs, none at the second evaluation."""
    env = spmd_env(devices) if devices > 1 else None
    found = json.loads(run(python_code(EVALUATIONS, str(devices)), env=env, timeout=600).stdout.strip().splitlines()[-1])
    lazy, jax = found["results"]["lazy"], found["results"]["jax"]
    assert lazy.keys() == jax.keys() and lazy["eval_examples_counted"] == 19, lazy
    for name, value in lazy.items():
        if isinstance(value, float):
            assert abs(value - jax[name]) <= float32_apart(1) * max(abs(value), 1.0), (name, lazy, jax)
        else:
            assert value == jax[name], (name, lazy, jax)
    graphs = found["graphs"]
    assert 1 <= graphs["jax-0"] <= graphs["lazy-0"] and graphs["jax-1"] == graphs["lazy-1"] == 0, graphs
    assert TASK == ("causal-lm" if "eval_perplexity" in lazy else "text-classification")
