"""A graph torch_xla lowered (xla/rehearsal.py captured it from the staged run) compiled for a TPU slice by libtpu, on
this machine and without a TPU: plan.py --rehearse's compile. tpu_compile.py compiles the JAX step from shapes; this
compiles what torch_xla itself would hand the TPU.
"""

import hashlib
import json
import re
import time
from pathlib import Path

from .tpu_compile import OUT_OF_HBM, _figures, _kept, _releases, topology_devices  # one compiler, two inputs

NUMBERS, METADATA = re.compile(r"\.\d+\b"), re.compile(r",? metadata=\{[^}]*\}")
COLLECTIVES = re.compile(r"= [^=]*? (all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)(-start)?\(")


def compile_module(proto: bytes, donors: list, *, topology: str, chips_per_host_bounds: tuple,
                   cache: Path | None = None) -> dict:
    """Compile one HLO module torch_xla lowered (xla/rehearsal.py captured it) for the slice; the figures per chip.

    jaxlib turns the module into StableHLO and its TPU client compiles it, as jax compiles its own programs. The
    conversion drops torch_xla's buffer donors (the peak would be about 20 % too high): they go back on as
    `jax.buffer_donor` argument attributes. Under SPMD the weights' shardings reach their parameters from the
    annotations the rehearsal left (allow_spmd_sharding_propagation_to_parameters), and the outputs keep theirs
    (..._to_output, as torch_xla sets it).
    """
    key = hashlib.sha256(json.dumps([hashlib.sha256(proto).hexdigest(), sorted(donors), topology,
                                     list(chips_per_host_bounds), _releases(),
                                     hashlib.sha256(Path(__file__).read_bytes()).hexdigest()]).encode()).hexdigest()[:32]
    found = cache / f"graph-{key}.json" if cache else None
    if found and found.is_file():
        return {**json.loads(found.read_text()), "cached": str(found)}
    import numpy as np
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    devices = topology_devices(topology, chips_per_host_bounds)
    with mlir.make_ir_context():
        module = ir.Module.parse(xla_client._xla.mlir.hlo_to_stablehlo(proto))
        main = next(op for op in module.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        attributes = [dict((named.name, named.attr) for named in ir.DictAttr(entry)) if True else None
                      for entry in ir.ArrayAttr(main.attributes["arg_attrs"])] if "arg_attrs" in main.attributes \
            else [{} for _ in ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).inputs]
        for index in donors:
            attributes[index]["jax.buffer_donor"] = ir.BoolAttr.get(True)
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(entry) for entry in attributes])
        bytecode = mlir.module_to_bytecode(module)
    options = compiler.get_compile_options(num_replicas=1, num_partitions=len(devices),
                                           device_assignment=np.array(devices).reshape(1, -1))
    if len(devices) > 1:
        options.executable_build_options.use_spmd_partitioning = True
        options.executable_build_options.allow_spmd_sharding_propagation_to_output = [True]
        options.executable_build_options.allow_spmd_sharding_propagation_to_parameters = [True]
    started = time.perf_counter()
    try:
        compiled = devices[0].client.compile(bytecode, xla_client.DeviceList(tuple(devices)), options)
    except Exception as error:
        used = OUT_OF_HBM.search(str(error))
        if not used:
            raise
        return _kept(found, {"peak_bytes": int(float(used.group(1)) * 2 ** 30), "parts": {}, "fits": False,
                             "said": used.group(0), "compile_seconds": round(time.perf_counter() - started, 1),
                             "chips": len(devices), "topology": topology, "flops": None, "bytes_accessed": None,
                             "collectives": None})
    seconds = time.perf_counter() - started
    memory = compiled.get_compiled_memory_stats()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    text = "\n".join(hlo.to_string() for hlo in compiled.hlo_modules())
    return _kept(found, {**_figures(memory, cost), "compile_seconds": round(seconds, 1), "chips": len(devices),
                         "topology": topology, "fits": None, "collectives": len(COLLECTIVES.findall(text)),
                         "program_sha256": _program_hash(text)})


def _program_hash(text: str) -> str:
    """sha256 of the TPU program the compiler made, its names' numbers and source metadata left out: two graphs whose
    programs hash alike hand the TPU the same program (torch_xla numbers instructions per process)."""
    plain = NUMBERS.sub("", METADATA.sub("", text))
    return hashlib.sha256(plain.encode()).hexdigest()[:16]
