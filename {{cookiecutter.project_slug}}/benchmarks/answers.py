"""The seed's two questions, each answered by a table of at most 8 rows from one results file (results_file.py).

What each way of batching the evaluation (a causal LM: of padding its text) adds in graphs, and what each precision
level puts in the graph, stores, keeps of its updates and drifts. Every cell and every sentence here is computed from
the file's records: page.py lays them out and draws their pictures, tests/test_benchmark_page.py holds the committed
page to them. Units are in the headers; step times measured on XLA:CPU say so, since they compare rows on this CPU
and nothing of a TPU.
"""

from dataclasses import dataclass, field

from .records import by_group

MIB = 2**20
CPU_ONLY = "XLA:CPU, compares rows only"


@dataclass
class Answer:
    """A question's table: header (units included), rows of cells, the sentences the numbers support, and the
    picture's panels: (title, unit, labels, values)."""

    key: str
    question: str
    header: list[str]
    rows: list[list[str]]
    says: list[str]
    panels: list[tuple[str, str, list[str], list[float]]] = field(default_factory=list)


def _ok(records) -> list:
    return [record for record in records if record.status == "ok"]


def _number(value, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def _tpu_eval(info: dict) -> tuple[str, str]:
    """(compile seconds, peak MiB per chip) of a row's evaluation graphs on one v5e chip, or why there are none."""
    seconds = info.get("tpu_eval_compile_s_v5e_1")
    if not isinstance(seconds, (int, float)):
        why = str(seconds or "not rehearsed")
        return ("none: the run pads its last batch" if "last batch" in why else "not rehearsed"), "n/a"
    graphs = ((info.get("tpu") or {}).get("v5e-1") or {}).get("eval_graphs") or []
    peaks = [graph.get("peak_bytes") for graph in graphs if isinstance(graph.get("peak_bytes"), (int, float))]
    return f"{seconds:.1f}", _number(max(peaks) / MIB) if peaks else "n/a"


def eval_batching(records) -> Answer | None:
    rows = _ok(records)
    if not rows:
        return None
    table, labels, graphs = [], [], []
    for record in rows:
        info = record.extra_info
        label = f"batch {info['eval_batch_size']}, last batch {info['last_batch']}, {info['padding']} length"
        label += " (the default)" if info.get("project_default") else ""
        compile_s, peak = _tpu_eval(info)
        table.append([label, str(info["eval_compilations"]), f"+{info['graphs_added_over_default']}",
                      f"{info['examples_counted']} of {info['eval_set_size']}", compile_s, peak])
        labels.append(f"{info['eval_batch_size']}/{info['last_batch']}/{info['padding']}")
        graphs.append(float(info["eval_compilations"]))
    # A run of some of the rows (pytest -k) may leave the default's out: the first row then stands for it.
    default = next((record.extra_info for record in rows if record.extra_info.get("project_default")), rows[0].extra_info)
    adding = [f"{label} +{record.extra_info['graphs_added_over_default']}" for label, record in zip(labels, rows, strict=True)
              if record.extra_info["graphs_added_over_default"]]
    short = [f"{label} counts {record.extra_info['examples_counted']} of {record.extra_info['eval_set_size']} examples"
             for label, record in zip(labels, rows, strict=True)
             if record.extra_info["examples_counted"] != record.extra_info["eval_set_size"]]
    who = "the default evaluation" if default.get("project_default") else f"{labels[0]}'s evaluation"
    says = [f"After training with batch {default['train_batch_size']}, {who} compiles "
            f"{default['eval_compilations']} graph(s); " + (", ".join(adding) + " more" if adding else "no choice adds one")
            + (f"; the other {len(rows) - len(adding)} add none." if len(rows) > len(adding) else ".") + (" " + "; ".join(short) + "." if short else "")]
    compiled = [row for row in table if row[4][0].isdigit()]
    if compiled:
        says.append(f"The TPU compiler (plan.py --rehearse, libtpu, one v5e chip, no TPU) compiled the evaluation of "
                    f"{len(compiled)} row(s): its seconds are this machine's CPU's; the peak is HBM per chip.")
    else:
        says.append("The TPU columns are empty in this run: BENCH_TPU=1 (or the full profile) rehearses each padded row.")
    header = ["eval batching", "eval graphs", "graphs added", "examples counted", "TPU compile, v5e (s)",
              "peak HBM per chip, v5e (MiB)"]
    return Answer("eval-batching", "What does each way of batching the evaluation add?", header, table, says,
                  [("graphs the evaluation compiles", "graphs", labels, graphs)])


# The precision group's modes under the level names the rest of the project uses.
MODES = {"fp32": "fp32", "autocast": "bf16", "xla-use-bf16": "pure-bf16-xla", "xla-downcast-bf16": "pure-bf16-downcast",
         "model-cast": "pure-bf16-cast"}


def _program(info: dict) -> str | None:
    step = (((info.get("tpu") or {}).get("v5e-4") or {}).get("step") or {})
    return step.get("program_sha256")


def precision(records, graphs=()) -> Answer | None:
    """The fine-tuning rows (every level, Kahan's too), with what the precision group read from each level's graph
    (the demo model's rows) where it measured that level."""
    rows = _ok(records)
    if not rows:
        return None
    measured = {MODES.get(r.extra_info.get("mode")): r.extra_info for r in _ok(graphs) if r.extra_info.get("model") == "demo"}
    table, labels, state, kept = [], [], [], []
    programs = {}
    for record in rows:
        info = record.extra_info
        level, base = info["level"], info.get("effective", info["level"])
        read = measured.get(base, {}) if level == base else {}
        program = _program(read) if read else None
        same = programs.get(program, "") if program else ""
        if program:
            programs.setdefault(program, level)
        cells = [level + (" (the default)" if level == "bf16" else ""),
                 info.get("via", "") + (" + Kahan summation" if info.get("kahan_summation") else "")]
        if measured:
            cells.append(read.get("graph_types", f"as {base}, and a bf16 buffer per weight"))
        cells += [_number(info["state_bytes_per_device"] / MIB, 2), _number(100 * info["fraction_changed"], 0)]
        if measured:
            cells.append(_number(read["loss_drift"], 4) if "loss_drift" in read else "n/a")
        cells.append(_number(1000 * info["steady_step_s"], 0))
        if measured:
            cells.append(f"{same} (program {program[:8]})" if same else (f"its own (program {program[:8]})" if program
                                                                          else "not hashed"))
        table.append(cells)
        labels.append(level)
        state.append(info["state_bytes_per_device"] / MIB)
        kept.append(100 * info["fraction_changed"])
    drift = [f"loss drift from fp32 (nats, {_drift_steps(measured)} steps)"] if measured else []
    header = ["level", "set by", *(["in the graph"] if measured else []), "weights + AdamW state (MiB)",
              "weight elements updated (%)", *drift, f"step (ms, {CPU_ONLY})", *(["same TPU program as"] if measured else [])]
    question = ("What does each precision level put in the graph, store, and lose?" if measured else
                "What does each precision level store, and lose?")
    return Answer("precision", question, header, table,
                  _precision_says(rows, measured), [("weights + AdamW state", "MiB", labels, state),
                                                    ("weight elements an update changed", "%", labels, kept)])


def _drift_steps(measured: dict):
    return next((found["loss_steps"] for found in measured.values() if found.get("loss_steps")), "n/a")


def _precision_says(rows, measured) -> list[str]:
    info = {record.extra_info["level"]: record.extra_info for record in rows}
    fp32, pure = info.get("fp32"), [level for level in info if level.startswith("pure") and "kahan" not in level]
    says = [f"Bytes, elements updated and step times are from fine-tuning the demo model at a learning rate of "
            f"{rows[0].extra_info['learning_rate']:g} for {rows[0].extra_info['optimizer_steps']} optimizer steps "
            "(bytes: weights and AdamW state as one device stores them, read from the graph)"
            + (f"; the graph's element types and the loss drift from fp32 after {_drift_steps(measured)} steps are the "
               "precision group's, "
               "read from each level's training graph." if measured else ".")]
    if fp32 and pure:
        lowest = min(100 * info[level]["fraction_changed"] for level in pure)
        says.append(f"fp32 and the default bf16 change {100 * fp32['fraction_changed']:.0f} % and "
                    f"{100 * info['bf16']['fraction_changed']:.0f} % of the weight elements; the pure levels store "
                    f"{info[pure[0]]['state_bytes_per_device'] / fp32['state_bytes_per_device']:.2f}x the bytes and "
                    f"change as few as {lowest:.0f} %: the rest of their updates round away.")
    # The table's own step column (the fine-tuning run's steady step), so that the sentence says what the table shows.
    timed = {level: info[level]["steady_step_s"] for level in info if "kahan" not in level}
    if "fp32" in timed and len(timed) > 1:
        ratios = [timed[level] / timed["fp32"] for level in timed if level != "fp32"]
        says.append((f"On XLA:CPU every bf16 level's step is {min(ratios):.1f}-{max(ratios):.1f}x fp32's, slower: "
                     if min(ratios) > 1 else
                     f"On XLA:CPU the bf16 levels' steps are {min(ratios):.1f}-{max(ratios):.1f}x fp32's (one run "
                     "each of a tiny model's step, which the machine's load moves): ")
                    + "bf16's speed is a TPU's; the step times here compare rows on this CPU only.")
    hashed = {level: _program(measured[level]) for level in measured if _program(measured[level])}
    alike = {}
    for level in hashed:
        if level in info:
            key = (info[level]["state_bytes_per_device"], measured[level].get("loss_drift"))
            alike.setdefault(key, []).append(level)
    for levels in (group for group in alike.values() if len(group) > 1):
        programs = sorted({hashed[level][:8] for level in levels})
        names = ", ".join(levels[:-1]) + f" and {levels[-1]}"
        if len(programs) == 1:
            says.append(f"{names} hand the TPU the same program (hash {programs[0]}): their equal bytes and drift are "
                        "one program measured again, not a finding.")
        else:
            says.append(f"{names} store the same bytes and drift the same from fp32, yet hand the TPU "
                        f"{len(programs)} different programs (hashes {', '.join(programs)}).")
    return says


def packing(records) -> Answer | None:
    rows = _ok(records)
    if not rows:
        return None
    table = [[r.extra_info["padding"], str(r.extra_info["compilations"]), str(r.extra_info["recompilations"]),
              _number(100 * r.extra_info["train_padding_fraction"], 0), _number(r.extra_info["steady_tokens_per_second"], 0)]
             for r in rows]
    fixed = next((r.extra_info for r in rows if r.extra_info["padding"] == "fixed"), rows[0].extra_info)
    more = [f"{r.extra_info['padding']} {r.extra_info['compilations']} ({r.extra_info['recompilations']} after warm-up)"
            for r in rows if r.extra_info["compilations"] > fixed["compilations"]]
    says = [f"Packed blocks (fixed) compile {fixed['compilations']} graphs and pad nothing"
            + (f"; {', '.join(more)}." if more else ".")]
    header = ["padding", "graphs", "graphs after warm-up", "padding in the batches (%)",
              f"real tokens per second ({CPU_ONLY})"]
    labels = [r.extra_info["padding"] for r in rows]
    return Answer("padding", "What does each way of padding the text add?", header, table, says,
                  [("graphs compiled", "graphs", labels, [float(r.extra_info["compilations"]) for r in rows])])


def answers(records) -> list[Answer]:
    """The page's two answers for this project's task (a classifier's run has eval batching; a causal LM's, packing)."""
    groups = by_group(records)
    first = eval_batching(groups.get("recompilation: eval batching", [])) or packing(groups.get("causal-lm: packing", []))
    second = precision(groups.get("precision: fine-tuning", []), groups.get("precision", []))
    return [answer for answer in (first, second) if answer is not None]
