"""The one door to the XLA runtime: the only folder that imports torch_xla; the rest of the package calls it.

PyTorch/XLA 2.9 is likely its last release (TorchTPU, `torch_tpu`, replaces it). Whoever ports this project
replaces this folder and the layouts' few calls into it; docs/torch-tpu.md maps each function here to its
torch_xla call and its torch_tpu counterpart. Nothing here imports torch_xla at import time: the notebook imports
the package in its device-free parent process, and the laptop path runs with torch_xla absent.

  runtime.py      is torch_xla installed, importable, started; this process's host index; its random seed
  device.py       the XLA device: its kind, graph cuts (sync), accumulators that do not recompile, reads to the host
  compilation.py  compilation counters, the persistent cache, torch_xla's compilation analysis
  precision.py    the bf16 variables and the check of a lowered graph's element types
  sharding.py     SPMD: the mesh, sharding annotations, FSDPv2's wrapper, the sharded input loader
  profiling.py    torch_xla's profiler: a trace of chosen steps, and a marker for each
  checkpoint.py   torch_xla's planners for torch.distributed.checkpoint, and activation checkpointing
  hub_kernels.py  transformers' hub kernels turned off on a model that trains on XLA (kernels knows no xla device)
  jax_step.py     the default step where it can run: the whole training step as one JAX function, traced once
                  (torchax, call_jax)
  model_in_trace.py  the model as that function traces it: autocast, FSDPv2's wrappers and recomputed layers
  tpu_compile.py  plan.py --compile: that step compiled for a TPU slice by libtpu, on this machine, without a TPU
  rehearsal.py    plan.py --rehearse: the run's own graphs captured at each cut instead of run (placeholders)
  tpu_graphs.py   each such graph compiled for a TPU slice by libtpu
"""
