"""Model building shared by every task: graph-friendly attention and activation checkpointing, and LoRA adapters.

  modeling.py  what every model needs on XLA (eager attention with its mask in the graph, no KV cache, tied weights)
  lora.py      LoRA with peft (--lora_r): adapters added before the layout wraps the model, exported or merged
"""
