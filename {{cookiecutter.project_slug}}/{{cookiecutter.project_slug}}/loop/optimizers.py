"""The optimizer a run steps with (--optim): the project's AdamW by default (adamw.py), transformers' Adafactor, or
(with --kahan_summation) optimi's AdamW, which keeps the part of each bf16 update that rounding drops
(precision/bf16_updates.py).

Each is stepped inside the training step's graph, and none adds a graph as its learning rate or step count moves.
The default AdamW sends its moving numbers as one tensor; the other two take them as Python scalars (Adafactor's
per-step decay among them), so their runs send every Python scalar to the device as data (xla/compilation.py).
"""

import torch

from .adamw import AdamW

# What transformers' Trainer leaves out of weight decay (Trainer.get_decay_parameter_names, 5.25), as transformers'
# no_trainer examples do (run_glue_no_trainer.py): biases and normalization weights, by layer type and by name. Decaying a LayerNorm's scale pulls
# it towards 0, not towards a neutral 1, and a bias has no scale for decay to regularize.
NO_DECAY_LAYERS = (torch.nn.LayerNorm,)
NO_DECAY_NAMES = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")


def takes_python_scalars(name: str, kahan_summation: bool) -> bool:
    """Whether the optimizer passes its learning rate or step-dependent numbers to the device as Python scalars."""
    return name != "adamw" or kahan_summation


def parameter_groups(model, weight_decay: float) -> list[dict]:
    """The trainable weights in two groups, as the Trainer makes them: decayed at `weight_decay`, and biases and
    normalization weights at 0 (either group left out when empty). Frozen weights (LoRA's base) get none."""
    from transformers.trainer_pt_utils import get_parameter_names

    decayed = set(get_parameter_names(model, NO_DECAY_LAYERS, NO_DECAY_NAMES))
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [{"params": [p for name, p in trainable if name in decayed], "weight_decay": weight_decay},
              {"params": [p for name, p in trainable if name not in decayed], "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def make_optimizer(name: str, parameters, learning_rate: float, weight_decay: float, kahan_summation: bool):
    """`parameters`: parameter_groups' groups (each with its own weight decay) or a list of weights."""
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # As in Accelerate's TPU fine-tuning example: the run's learning rate and schedule, not Adafactor's own
        # relative step size. Its state is factored: per matrix a row and a column of second moments, no first
        # moment (beta1 None), about a weight's worth of bytes less per weight than AdamW's two moments.
        return Adafactor(parameters, lr=learning_rate, weight_decay=weight_decay, scale_parameter=False,
                         relative_step=False, warmup_init=False)
    if not kahan_summation:
        return AdamW(parameters, lr=learning_rate, weight_decay=weight_decay)
    from optimi import AdamW as KahanAdamW

    # foreach and triton off: optimi 0.3 picks Triton only for CUDA tensors, and its foreach path warns that
    # it is deprecated; the for-loop step is one fused graph on XLA all the same.
    return KahanAdamW(parameters, lr=learning_rate, weight_decay=weight_decay, kahan_sum=True, foreach=False, triton=False)


def create_state(optimizer) -> None:
    """The default AdamW's state, created before the first step (AdamW.create_state says why); the others make theirs
    in their first step. `optimizer` may be Accelerate's wrapper."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if isinstance(inner, AdamW):
        inner.create_state()
