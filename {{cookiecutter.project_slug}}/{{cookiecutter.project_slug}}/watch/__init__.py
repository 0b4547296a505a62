"""What a run is watched with: compilation counts and the cache, the recompilation watch, host memory.

  compilations.py      how many graphs this process compiled, in how long, and the persistent cache's folder
  compile_analysis.py  torch_xla's own account of each compilation (cause, Python line), parsed
  graph_watch.py       the recompilation watch, a callback: every graph, and why one after warm-up appeared
  memory.py            host memory (Pss) summed over a process tree: the shared-model benchmark's instrument
"""
