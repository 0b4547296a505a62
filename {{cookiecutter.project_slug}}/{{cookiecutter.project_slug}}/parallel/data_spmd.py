"""The data layout with one process per host: every chip of the host driven from one process over an SPMD mesh, each
holding a whole replica of the weights and a share of every batch. It is how the whole JAX step (xla/jax_step.py)
runs data-parallel: inside one JAX function nothing averages gradients between processes, but under SPMD the batch
is one tensor split over the chips and the partitioner adds the all-reduce to the step's graph. The lazy step runs
here too (the same all-reduce, in its graph).

Chosen by parallel/__init__.py when one process sees several chips (on a TPU VM, `python train.py`; here
CPU_NUM_DEVICES); Accelerate's launchers, one process per chip, keep data.py. Everything but the weights' placement is
the fsdp layout's: the mesh, the host-side loaders feeding sharded batches, the sharded checkpoints.
"""

from ..models.modeling import enable_gradient_checkpointing
from ..xla.device import current_device
from .fsdp import FsdpV2


class DataOverSpmd(FsdpV2):
    name = "data"

    def wrap(self, model):
        """The whole model on the devices, every weight replicated (SPMD's default for a tensor without a sharding;
        the JAX step marks each one so, xla/jax_step.py)."""
        if self.model_options.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        self.model = model.to(current_device())
        return self.model

    def plain_model(self, accelerator):
        return self.model

    def host_state_dict(self, accelerator, scratch) -> dict:
        """The weights as plain CPU tensors under the model's own names: every chip of this one host holds them all."""
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}
