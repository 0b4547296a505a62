"""plan.py's table: a row per figure, a column per TPU slice, from the plan's report (plan_cli.make_plan). Figures are
per device: a chip, or half a TPU7x chip (each of its chips is two devices)."""

from .targets import GIB


def gib(value) -> str:
    return "-" if value is None else f"{value / GIB:.2f} GiB"


def figure(value: float) -> str:
    """A figure with its digits: whole from 100 up, else three significant (at 1 x 8,192 tokens a chip an 8B model's
    0.25 examples/s printed as 0)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def duration(seconds: float) -> str:
    return f"{figure(seconds * 1e3)} ms" if seconds < 1 else f"{seconds:.0f} s" if seconds < 3600 else f"{seconds / 3600:.3g} h"


def table(report: dict) -> str:
    names = list(report["targets"])
    rows = [("", names)]

    def row(label, value):
        rows.append((label, [value(report["targets"][name]) for name in names]))

    recipe = report["recipe"]
    row("chips (devices)", lambda t: str(t["chips"]) + (f" ({t['devices']})" if t["devices"] != t["chips"] else ""))
    row("chips per host", lambda t: str(t["chips_per_host"]))
    row("usable HBM per device", lambda t: gib(t["usable_hbm_bytes"]))
    for part in ("weights", "gradients", "optimizer_state", "activations"):
        row(f"  {part.replace('_', ' ')}", lambda t, part=part: gib(t["estimate"]["parts"][part]))
    row("  activations, checkpointed", lambda t: gib(t["estimate"]["activations_checkpointed"]))
    row("  recomputed near capacity", lambda t: gib(t["estimate"]["recomputed"]))
    row("peak per device (estimate)", lambda t: gib(t["estimate"]["peak_bytes"]) if t["estimate"]["peak_bytes"] is not None
        else "no formula")
    row("fits", lambda t: "compile to know" if t["fits"] is None else "yes" if t["fits"] else "NO")
    row("largest batch per device", lambda t: "-" if t["estimate"]["largest_batch"] is None
        else str(t["estimate"]["largest_batch"]))
    row("step FLOPs per device", lambda t: f"{t['step']['model_flops_per_chip']:.3g}")
    row(f"step time at {recipe['mfu']:.0%} MFU", lambda t: duration(t["step"]["mfu_seconds"]))
    row("roofline step time", lambda t: duration(t["step"]["roofline_seconds"]) +
        (" (compiler)" if "compiler" in t["step"]["roofline_from"] else ""))
    row("step time (the slower)", lambda t: duration(t["step"]["seconds"]))
    row("examples/s per device", lambda t: figure(recipe['per_chip_batch'] / t['step']['seconds']))
    row("optimizer steps", lambda t: str(t["run"]["optimizer_steps"]))
    row("evaluations", lambda t: f"{t['run']['evaluations']} x {duration(t['evaluation']['seconds'])}")
    row("  training", lambda t: duration(t["run"]["training_seconds"]))
    row("  evaluating", lambda t: duration(t["run"]["evaluation_seconds"]))
    row("  compiling" + (" (assumed)" if any("assumed" in report["targets"][name]["run"]["compile_from"]
                                              for name in names) else ""),
        lambda t: duration(t["run"]["compile_seconds"]))
    row("run hours", lambda t: f"{t['run']['hours']:.3g}")
    row("chip-hours", lambda t: f"{t['run']['chip_hours']:.3g}")
    row("cost, USD", lambda t: "- (no price)" if t["run"]["cost"] is None
        else f"{t['run']['cost']:.3g} at {t['run']['price_per_chip_hour']:.2f}")
    if any(report["targets"][name]["compiler"] for name in names):
        compiled = lambda key, show: lambda t: show(t["compiler"][key]) if t["compiler"] else "-"  # noqa: E731
        row("compiler: peak per device", compiled("peak_bytes", gib))
        for part in ("arguments", "outputs", "temporaries", "code", "aliased"):
            row(f"  {part}", lambda t, part=part: gib(t["compiler"]["parts"][part])
                if t["compiler"] and part in t["compiler"]["parts"] else "-")
        row("estimate / compiler", compiled("estimate_over_compiler", lambda ratio: "-" if ratio is None
                                            else f"{ratio:.2f}"))
        row("compiler FLOPs per device", compiled("flops", lambda flops: f"{flops:.3g}" if flops else "-"))
        row("compile seconds", compiled("compile_seconds", lambda seconds: f"{seconds:.0f}"))
        evaluation = lambda show: lambda t: show(t["compiler"]["evaluation"]) if t["compiler"] else "-"  # noqa: E731
        row("compiler: evaluation's peak", evaluation(lambda found: gib(found["peak_bytes"])))
        row("  eval batch per device", evaluation(lambda found: str(found["batch_per_chip"])))
        row("  its compile seconds", evaluation(lambda found: f"{found['compile_seconds']:.0f}"))
        row("compiler: fits (step and evaluation)", lambda t: "-" if not t["compiler"] else "yes" if t["compiler"]["fits"]
            else "NO (evaluation)" if t["compiler"]["step_fits"] else "NO (step)" if t["compiler"]["evaluation"]["fits"]
            else "NO (step, evaluation)")
        if any((report["targets"][name]["compiler"] or {}).get("several_steps") for name in names):
            call = lambda show: lambda t: show(t["compiler"]["several_steps"]) if (t["compiler"] or {}).get(  # noqa: E731
                "several_steps") else "-"
            row("compiler: a call of K steps", call(lambda found: f"K = {found['steps_per_call']}"))
            row("  peak per device (K batches)", call(lambda found: gib(found["peak_bytes"])))
            row("  compile seconds", call(lambda found: f"{found['compile_seconds']:.0f}"))
    width = max(len(label) for label, _ in rows)
    columns = [max(len(values[index]) for _, values in rows) for index in range(len(names))]
    return "\n".join(f"{label:<{width}}  " + "  ".join(f"{value:>{columns[i]}}" for i, value in enumerate(values))
                     for label, values in rows)


def notes(report: dict, compiled: bool) -> list[str]:
    """The lines under the table: why a figure is missing, and where the time's bounds come from (each said once, with
    the slices it holds for)."""
    lines, said = [], {}
    for name, target in report["targets"].items():
        if target["estimate"]["peak_bytes"] is None:
            lines.append(f"{name}: no estimate of the peak: {target['estimate']['why']}")
        if compiled and target["compiler_why"]:
            lines.append(f"{name}: the TPU compiler here cannot answer: {target['compiler_why']}")
        for note in (f"step time bound by the {target['step']['bound']}", f"roofline from {target['step']['roofline_from']}",
                     f"compile seconds {target['run']['compile_from']}"):
            said.setdefault(note, []).append(name)
    return lines + [f"{note} ({', '.join(names)})" for note, names in said.items()]
