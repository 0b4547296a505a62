"""Each benchmark group's finding in one line, computed from its records (the page's list under the two answers).

A ratio of two timings is read against its noise: where the rounds' spread is recorded (the timed-alone groups'
ranges), a ratio whose spread is wider than its distance from 1 is "within noise"; a ratio from one run of each loop
is within noise when it is within ONE_RUN of 1 (below). Ratios of bytes and counts are exact.
"""

from .records import by_group

MIB, GIB = 2**20, 2**30
# Six runs of the same loop back to back on the 2-core machine the reference ran on: steady step 0.081-0.126 s, so one
# run of a loop moves up to about 25 % from the next (docs/benchmarks.md of the template).
ONE_RUN = 0.25


def ratio(value, spread: str | None = None) -> str:
    """'0.84x (rounds 0.82-0.91)', or 'within noise (...)' where the spread or one run's noise covers 1."""
    if not isinstance(value, (int, float)):
        return "n/a"
    if spread:
        low, _, high = str(spread).partition("-")
        low, high = float(low), float(high or low)
        if high - low > abs(value - 1) or low <= 1 <= high:
            return f"{value:.2f}x, within noise (rounds {spread})"
        return f"{value:.2f}x (rounds {spread})"
    if abs(value - 1) <= ONE_RUN:
        return f"{value:.2f}x, within noise (one run each; runs of one loop here spread up to {ONE_RUN:.0%})"
    return f"{value:.2f}x (one run each)"


def _by_name(records) -> dict:
    return {record.name: record.extra_info for record in records if record.status == "ok"}


def _loops(records) -> str:
    rows = [(r.name, r.extra_info) for r in records if r.status == "ok"]
    counts = ", ".join(f"{name} {info.get('compilations', info.get('graphs'))} ({info.get('recompilations') if info.get('recompilations') is not None else 'not watched'})"
                       for name, info in rows)
    watch = _by_name(records).get("test_project_loop_without_the_watch", {}).get("wall_vs_project")
    tail = f"; without the watch the wall time is {ratio(watch)}" if watch is not None else ""
    failed = [record.name for record in records if record.status != "ok"]
    if failed:
        tail += f"; did not train here (reasons in the full table): {', '.join(failed)}"
    return f"graphs compiled (after warm-up): {counts}{tail}."


def _against_trainer(records) -> str:
    parts = [f"{info.get('precision')}: steady step {ratio(info.get('steady_step_vs_tuned_trainer'), info.get('steady_ratio_range'))}"
             f", wall {ratio(info.get('wall_vs_tuned_trainer'), info.get('wall_ratio_range'))}"
             for info in _by_name(records).values()]
    return "the project's loop over the TPU-tuned Trainer, alone: " + "; ".join(parts) + " (below 1: faster)."


def _logging(records) -> str:
    parts = [f"{name}: steady step {ratio(info.get('steady_step_vs_no_logs'))} of no logs"
             for name, info in _by_name(records).items() if info.get("logging_steps")]
    return "; ".join(parts) + "."


def _checkpoints(records) -> str:
    info = next(iter(_by_name(records).values()), {})
    return (f"a save takes {1000 * info.get('seconds_per_save', 0):.0f} ms; checkpoints every {info.get('save_steps')} "
            f"steps make the step {ratio(info.get('step_time_with_over_without'))} of epoch saves only.")


def _fsdp(records) -> str:
    parts = [f"{info['devices']} device(s) {info['state_bytes_per_device'] / MIB:.2f} MiB ({info['state_bytes_vs_whole']:.2f} "
             "of the whole)" for info in _by_name(records).values()]
    return "weights + AdamW state on the busiest device: " + ", ".join(parts) + "."


def _shared(records) -> str:
    parts = []
    for info in _by_name(records).values():
        fork = info["per_worker_pss_bytes"] / info["shared_fork_pss_bytes"]
        pickled = info["per_worker_pss_bytes"] / info["shared_pickled_pss_bytes"]
        parts.append(f"{info['workers']} workers: each building its model {info['per_worker_pss_bytes'] / GIB:.2f} GiB, "
                     f"forked {info['shared_fork_pss_bytes'] / GIB:.2f} GiB ({fork:.2f}x less), pickled as a TPU "
                     f"runtime does {info['shared_pickled_pss_bytes'] / GIB:.2f} GiB ("
                     + (f"{pickled:.2f}x less" if pickled > 1 else f"{1 / pickled:.2f}x more: no saving") + ")")
    return "host memory (Pss, peak): " + "; ".join(parts) + "."


def _lora(records) -> str:
    info = next(iter(_by_name(records).values()), {})
    return (f"LoRA r={info.get('lora_r')} trains {info.get('trainable_parameters_lora')} of "
            f"{info.get('total_parameters_lora')} parameters; AdamW state {info.get('optimizer_bytes_per_device_lora', 0) / MIB:.2f} "
            f"MiB against {info.get('optimizer_bytes_per_device_full', 0) / MIB:.2f} MiB.")


def _host(records) -> str:
    parts = [f"{name} {info['host_over_chip_v6e']:.2f}" for name, info in _by_name(records).items()
             if isinstance(info.get("host_over_chip_v6e"), (int, float))]
    model = next(iter(_by_name(records).values()), {}).get("model", "the default model")
    return (f"{model}, the host's time a step over a v6e's (computed at 50 % MFU; above 1 the chip waits): "
            + ", ".join(parts) + ".")


def _cache(records) -> str:
    info = next(iter(_by_name(records).values()), {})
    return (f"a second run over the cache: {info.get('cache_hits')} hit(s), {info.get('cache_read_failures')} read "
            "failure(s): torch_xla 2.9 writes the cache but cannot read it back.")


def _lead(records) -> str:
    info = next(iter(_by_name(records).values()), {})
    return (f"timed round against round, the project's loop trains {ratio(info.get('tokens_per_second_lead'), info.get('lead_range'))} "
            f"SFTTrainer's real tokens per second; its wall time is {ratio(info.get('wall_vs_sft'), info.get('wall_range'))} "
            "SFTTrainer's.")


def _compile_time(records) -> str:
    rows = _by_name(records)
    first = next(iter(rows.values()), {})
    narrowed = f", narrowed to {first.get('layers')} layers" if first.get("narrowed") else ""
    times = ", ".join(f"{name} {info['compile_seconds']:.1f} s" for name, info in rows.items())
    return (f"the TPU compiler (libtpu, {first.get('topology')}, no TPU) compiles {first.get('model')}'s step"
            f"{narrowed}: {times} (this CPU's seconds).")


def _generation(records) -> str:
    rows = list(_by_name(records).values())
    over = next((info["device_over_host"] for info in rows if info.get("device_over_host")), None)
    rates = ", ".join(f"{info['generated_on']} {info['new_tokens_per_second']:.0f}" for info in rows)
    tail = f": {over:.1f}x (on XLA:CPU the device is this CPU too)" if over else ""
    return f"new tokens per second, {rates}{tail}."


def _generic(records) -> str:
    parts = []
    for record in records:
        value = record.headline
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        parts.append(f"{record.name} {record.headline_key}={shown}" if record.status == "ok" else f"{record.name} {record.status}")
    return "; ".join(parts) + "."


FINDINGS = {
    "recompilation: loops": _loops,
    "loops: steady step against the tuned Trainer": _against_trainer,
    "logging: cost": _logging,
    "checkpoints": _checkpoints,
    "fsdp: devices": _fsdp,
    "shared-model-memory": _shared,
    "lora": _lora,
    "full size: host against chip": _host,
    "recompilation: compilation cache": _cache,
    "causal-lm: lead over SFTTrainer": _lead,
    "causal-lm: loops": _loops,
    "causal-lm: generation": _generation,
    "compile time: layers as written against scanned": _compile_time,
}
# Shown in the two answers above the list.
ANSWERED = ("recompilation: eval batching", "precision", "precision: fine-tuning", "causal-lm: packing")


def findings(records) -> list[tuple[str, str]]:
    """(group, its finding in one line) for every group the answers do not show, in the order they ran."""
    lines = []
    for group, members in by_group(records).items():
        if group in ANSWERED:
            continue
        try:
            lines.append((group, FINDINGS.get(group, _generic)(members)))
        except (KeyError, TypeError, ZeroDivisionError):  # a record without the fields its finding reads
            lines.append((group, _generic(members)))
    return lines
