"""plan.py's table: a row per figure, a column per TPU slice, from the plan's report (plan_cli.make_plan)."""

from .targets import GIB


def gib(value) -> str:
    return f"{value / GIB:.2f} GiB"


def table(report: dict) -> str:
    names = list(report["targets"])
    rows = [("", names)]

    def row(label, value):
        rows.append((label, [value(report["targets"][name]) for name in names]))

    recipe = report["recipe"]
    row("usable HBM per chip", lambda t: gib(t["usable_hbm_bytes"]))
    for part in ("weights", "gradients", "optimizer_state", "activations"):
        row(f"  {part.replace('_', ' ')}", lambda t, part=part: gib(t["estimate"]["parts"][part]))
    row("  activations, checkpointed", lambda t: gib(t["estimate"]["activations_checkpointed"]))
    row("  recomputed near capacity", lambda t: gib(t["estimate"]["recomputed"]))
    row("peak per chip (estimate)", lambda t: gib(t["estimate"]["peak_bytes"]))
    row("fits", lambda t: "yes" if t["fits"] else "NO")
    row("largest batch per chip", lambda t: str(t["estimate"]["largest_batch"]))
    row("step FLOPs per chip", lambda t: f"{t['step']['model_flops_per_chip']:.3g}")
    row(f"step time at {recipe['mfu']:.0%} MFU", lambda t: f"{t['step']['seconds'] * 1e3:.1f} ms")
    row("examples/s per chip", lambda t: f"{t['step']['examples_per_second_per_chip']:.0f}")
    row("optimizer steps", lambda t: str(t["run"]["optimizer_steps"]))
    row("run hours", lambda t: f"{t['run']['hours']:.3g}")
    row("chip-hours", lambda t: f"{t['run']['chip_hours']:.3g}")
    row("cost, USD", lambda t: f"{t['run']['cost']:.3g} at {t['run']['price_per_chip_hour']:.2f}")
    if any(report["targets"][name]["compiler"] for name in names):
        compiled = lambda key, show: lambda t: show(t["compiler"][key]) if t["compiler"] else "-"  # noqa: E731
        row("compiler: peak per chip", compiled("peak_bytes", gib))
        for part in ("arguments", "outputs", "temporaries", "code", "aliased"):
            row(f"  {part}", lambda t, part=part: gib(t["compiler"]["parts"][part])
                if t["compiler"] and part in t["compiler"]["parts"] else "-")
        row("compiler: fits", compiled("fits", lambda fits: "yes" if fits else "NO"))
        row("estimate / compiler", compiled("estimate_over_compiler", lambda ratio: f"{ratio:.2f}"))
        row("compiler FLOPs per chip", compiled("flops", lambda flops: f"{flops:.3g}" if flops else "-"))
        row("roofline step time", compiled("roofline_step_seconds",
                                           lambda seconds: f"{seconds * 1e3:.1f} ms" if seconds else "-"))
        row("compile seconds", compiled("compile_seconds", lambda seconds: f"{seconds:.0f}"))
    width = max(len(label) for label, _ in rows)
    columns = [max(len(values[index]) for _, values in rows) for index in range(len(names))]
    return "\n".join(f"{label:<{width}}  " + "  ".join(f"{value:>{columns[i]}}" for i, value in enumerate(values))
                     for label, values in rows)
