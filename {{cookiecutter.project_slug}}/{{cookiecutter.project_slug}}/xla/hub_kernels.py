"""transformers' hub kernels (the `kernels` package), turned off for a model that will train on XLA.

transformers 5.25 loads every model with `use_kernels=True` (from_pretrained's default unless USE_HUB_KERNELS=0), and
each `model.train()` / `model.eval()` kernelizes it again for the device it is on by then. `kernels` 0.19 knows no
`xla` device: the first `model.train()` on XLA raised "Unsupported device type 'xla'" (kernels'
`_validate_device_type`), for every pretrained model. A hub kernel is a CUDA, ROCm or CPU implementation of a layer,
never an XLA one: what XLA should trace is the layer's own torch forward. The model is reset while it is still on the
host, before a layout moves it; a model built from a config (the demo) has no kernels and is left as it is.
"""


def turn_off(model):
    """The model with its layers' own forwards and no kernelization on train()/eval() (a no-op where none is on)."""
    if getattr(model, "use_kernels", False):
        # transformers' setter: reset_kernels(), a kernelize with an empty mapping on the host (no hub access).
        model.use_kernels = False
    return model
