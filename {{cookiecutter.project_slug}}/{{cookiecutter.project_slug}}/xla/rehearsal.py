"""The run's own graphs, staged on XLA:CPU and never run: what plan.py --rehearse hands the TPU's compiler.

A rehearsal process (plan_rehearsal.py) trains through the run's code path with this module's `Stage` installed.
Every graph cut the run makes (`torch_xla.sync`, the loaders' `mark_step`, a read through device.to_host) is taken
over: the tensors the cut would compute are written out as one HLO module (torch_xla's own lowering, sharding
annotations and all), with the parameters the run would donate, and are then replaced instead of computed:

- weights, moments and anything else of at least PLACEHOLDER_BYTES by a placeholder, a graph parameter with no
  buffer (torch_xla's create_placeholder_tensor): nothing at full size stays allocated, and no graph ever runs on
  them. Under SPMD its sharding goes back on as an annotation (a placeholder refuses a real one; the compile lets
  the annotation reach the parameter: tpu_compile.compile_module);
- smaller tensors (losses, counts, the metrics' sums) by zeros on the device, so that the host may read them as the
  run does (a placeholder read on the host ends the process: torch_xla panics instead of raising). What the run
  reads is then a stand-in: no loss is bad, no example counted (plan_rehearsal.py says so to the loop).

Graphs are told apart by torch_xla's own graph hash, the key of its compilation cache: a run compiles one program per
hash, the rehearsal writes one module per hash and counts how often the run reached it.

torch_xla names no upstream way to do this (it has no deviceless TPU path). The calls used, each private:
_get_graph_hash, _get_xla_tensors_hlo_proto, _get_tensors_xla_device_data_node (the graph's parameters in order, by
tensor id), _get_xla_tensor_debug_info (a tensor's alias id: the data an in-place update writes over, which torch_xla
donates), _xla_get_tensor_id, _replace_xla_tensor, _xla_annotate_custom_sharding, _check_tensor_need_materialization;
and torch's own _functionalize_commit_update and _functionalize_sync (_settle says why).
"""

import hashlib
import json
import re
from pathlib import Path

from . import live_tensors  # the rehearsal's own

# At least this many bytes: a placeholder (not readable); below it zeros (readable). 1 MiB keeps every weight matrix
# of a real model a placeholder while a batch's losses, counts and kept scores (rows x classes) stay readable.
PLACEHOLDER_BYTES = 1 << 20
ALIAS = re.compile(r"AliasID: (\d+)")
# The lowerings torch_xla 2.9 makes differently when its device is a TPU (it checks the device type in each): gather
# (dense or sparse: XLA_DENSE_GATHER_FACTOR), an integer matrix product, and upsampling (TPU custom calls). A graph
# holding one may differ on a TPU from the graph captured here; the rehearsal names them rather than guess the TPU's.
TPU_ONLY_LOWERINGS = {
    "gather (dense or sparse on a TPU)": re.compile(r"aten::gather\("),
    "an integer matrix product": re.compile(r"= [su]\d+\[[^]]*\]\S* aten::(mm|bmm|addmm|baddbmm|matmul|dot)\("),
    "upsampling (a TPU custom call)": re.compile(r"aten::upsample_\w+\("),
}


class Stage:
    """Installed in the rehearsal's process before the run starts; `graphs` lists what it wrote to `folder`."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.graphs: list[dict] = []
        self._by_hash: dict[bytes, dict] = {}
        # Each stand-in's XLA tensor id -> the Python tensor it stands in: a graph that computes that tensor anew
        # donates the stand-in's buffer, as torch_xla donates the buffer an in-place update writes over.
        self._stands_in: dict[int, int] = {}
        # Each stand-in's XLA tensor id -> the id its tensor had before: torch_xla orders a graph's outputs (and so its
        # parameters and its hash) by its tensors' ids, and a synced tensor keeps its id, where a stand-in brings a new one.
        self._was: dict[int, int] = {}
        # Each annotated placeholder's Python id -> the graph hash of its IR (the annotation alone) when made.
        self._annotated: dict[int, bytes] = {}

    def install(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        from . import device
        from .sharding import replicate_under_spmd

        take_over = self.cut

        def sync(wait=False, reset_scope=True):
            take_over()
            live_tensors._next_seed()

        def mark_step(wait=False, reset_scope=True):
            sync()

        def to_host(tensors, _read=device.to_host):
            take_over(list(tensors))  # a read of pending tensors compiles them in the run: a graph of its own
            return _read(tensors)

        def zeros_like(tensor):
            # The optimizer's moments, lazily: nothing allocated at full size (release_weights makes them stand-ins).
            import torch

            zeros = torch.zeros(tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
            spec = torch_xla._XLAC._get_xla_sharding_spec(tensor)
            if spec and "replicated" not in spec:  # sharded as the weight is, as sharding.sharded_zeros_like does
                torch_xla._XLAC._xla_mark_sharding(zeros, torch_xla._XLAC._get_xla_op_sharding(tensor))
            else:  # else replicated under SPMD, as device._as_data sends them
                replicate_under_spmd(zeros)
            return zeros

        torch_xla.sync, xm.mark_step, device.to_host, device.zeros_like = sync, mark_step, to_host, zeros_like

    def placed(self, tensor, device, dtype):
        """A tensor of the meta device as the run would hold it on `device`, nothing allocated at full size: without
        SPMD its stand-in (data: a placeholder, or small zeros); under SPMD lazy zeros, which the layout may still
        shard (a placeholder refuses a sharding) and release_weights makes stand-ins. Lazy zeros without SPMD would
        stay pending behind the Parameter that aliases them, an input more in every step's graph."""
        import torch
        import torch_xla.runtime as xr

        zeros = torch.zeros(tuple(tensor.shape), dtype=dtype or tensor.dtype, device=device)
        if not xr.is_spmd():
            self._settle([zeros], torch, outputs=False)
        return zeros

    def release_weights(self) -> None:
        """Before the first step: every tensor already on the device (weights, moments, counters) gets its stand-in,
        so that each graph of the run sees the same kind of parameter (the first step's graph is the steady one's,
        as in the run) and knows which of them a graph writes over (its donors)."""
        import torch

        self._settle([tensor for tensor in live_tensors._live_xla_tensors() if not live_tensors._placeholder(tensor)], torch, outputs=False)

    def cut(self, reading: list | None = None) -> None:
        import torch
        import torch_xla

        tensors = [tensor for tensor in (reading or live_tensors._live_xla_tensors()) if getattr(tensor, "device", None) is not None
                   and tensor.device.type == "xla"]
        # A placeholder whose only IR is the sharding annotation the stage put on it is the run's data, not a graph.
        pending = [tensor for tensor, needed in zip(tensors, torch_xla._XLAC._check_tensor_need_materialization(tensors),
                                                     strict=True) if needed and not self._only_annotated(tensor)] if tensors else []
        if not pending:
            return
        # In torch_xla's own order (its live tensors are kept by id): the order is the graph's parameter and output
        # order, and so its hash; gc's order changes from cut to cut.
        pending.sort(key=self._order)
        self._capture(pending, reading is not None)
        self._settle(pending, torch)

    def _only_annotated(self, tensor) -> bool:
        """Whether the tensor is still the annotated placeholder _settle made it (its IR, by torch_xla's graph hash,
        unchanged since): data, not a graph. Its IR is that annotation, so torch_xla calls it pending."""
        import torch_xla

        kept = self._annotated.get(id(tensor))
        return kept is not None and kept == bytes(torch_xla._XLAC._get_graph_hash([tensor]))

    def _order(self, tensor) -> int:
        import torch_xla

        tensor_id = torch_xla._XLAC._xla_get_tensor_id(tensor)
        return self._was.get(tensor_id, tensor_id)

    def write_index(self) -> Path:
        path = self.folder / "graphs.json"
        path.write_text(json.dumps(self.graphs, indent=1) + "\n")
        return path

    def _capture(self, pending: list, read: bool) -> None:
        import torch_xla

        xlac = torch_xla._XLAC
        key = bytes(xlac._get_graph_hash(pending))
        if key in self._by_hash:
            self._by_hash[key]["reached"] += 1
            return
        proto = xlac._get_xla_tensors_hlo_proto(pending)
        ir = xlac._get_xla_tensors_text(pending)
        ids, _ = xlac._get_tensors_xla_device_data_node(pending)
        computed = {id(tensor) for tensor in pending}
        # torch_xla's own rule for data it made: an in-place update's output keeps the updated data's id as its alias.
        written_over = {int(found.group(1)) for tensor in pending
                        if (found := ALIAS.search(xlac._get_xla_tensor_debug_info(tensor)))}
        kind, batch = live_tensors._phase()
        if read:
            kind = f"{kind}: a read on the host"
        number = len(self.graphs) + 1
        name = f"graph-{number:03d}.hlo.pb"
        (self.folder / name).write_bytes(proto)
        graph = {
            "number": number, "kind": kind, "batch_shapes": batch, "file": name, "reached": 1, "epoch": live_tensors._epoch(),
            "outputs": len(pending), "parameters": len(ids),
            "donors": [index for index, tensor_id in enumerate(ids)
                       if self._stands_in.get(tensor_id) in computed or tensor_id in written_over],
            "hlo_sha256": hashlib.sha256(proto).hexdigest()[:16],
            "tpu_lowering_may_differ": [name for name, found in TPU_ONLY_LOWERINGS.items() if found.search(ir)],
        }
        self._by_hash[key] = graph
        self.graphs.append(graph)

    def _settle(self, tensors: list, torch, outputs: bool = True) -> None:
        """Each tensor replaced by a placeholder (large) or zeros (small) of its shape, dtype and sharding (`outputs`:
        the tensors a graph computed, else data already on the device)."""
        import torch_xla
        from torch_xla.core.xla_builder import create_placeholder_tensor

        xlac = torch_xla._XLAC
        replicated = live_tensors._replicated(torch, tensors[0].device) if tensors and outputs else None
        for tensor in sorted(tensors, key=self._order):  # stand-ins made in order: their ids keep it
            before = self._order(tensor)
            # A graph's output under SPMD comes back with the sharding its compiled program gave it (torch_xla lets
            # the sharding propagate to the outputs), which is known only once compiled: where the trace set none,
            # replicated, what the partitioner gives a weight updated from replicated inputs and every reduction.
            # (Data sent without a sharding keeps none: the lazy step's first graph differs from its second so.)
            sharding = xlac._get_xla_op_sharding(tensor) if xlac._get_xla_sharding_spec(tensor) else replicated
            if tensor.numel() * tensor.element_size() >= PLACEHOLDER_BYTES:
                stand_in = create_placeholder_tensor(tuple(tensor.shape), tensor.dtype)
                xlac._replace_xla_tensor(tensor, stand_in)
                if sharding is not None:
                    xlac._xla_annotate_custom_sharding(tensor, sharding)
                    self._annotated[id(tensor)] = bytes(xlac._get_graph_hash([tensor]))
            else:
                stand_in = torch.zeros(tuple(tensor.shape), dtype=tensor.dtype).to(tensor.device)
                # Sent this way a small tensor is a graph constant until a sync makes it data (device.device_values
                # says why): made data now, alone, so that no later graph takes it as a constant or computes it.
                xlac._xla_sync_multi([stand_in], [], True, True)
                if sharding is not None:
                    xlac._xla_mark_sharding(stand_in, sharding)
                xlac._replace_xla_tensor(tensor, stand_in)
            if torch._is_functional_tensor(tensor):
                # torch_xla's _replace_xla_tensor swaps the XLA tensor inside torch's functionalization wrapper, not
                # the value the wrapper's storage keeps for its aliases: an in-place update later (AdamW's) brings
                # that old value back, and with it every step before (float32's weights grew a step a graph). The
                # stand-in is committed to the storage as functionalization commits an in-place update.
                torch._functionalize_commit_update(tensor)
                torch._functionalize_sync(tensor)
            self._stands_in[xlac._xla_get_tensor_id(stand_in)] = id(tensor)
            self._was[xlac._xla_get_tensor_id(stand_in)] = before
