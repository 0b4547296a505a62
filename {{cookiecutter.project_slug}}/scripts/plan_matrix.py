"""docs/plan.md's matrix table ("plan against the TPU compiler"), written from its results file.

    python scripts/plan_matrix.py [RESULTS] [--write docs/plan.md | --check docs/plan.md]

RESULTS (default docs/plan-matrix.json, the committed reference run) is the file the benchmark group writes
(`pytest benchmarks/test_plan_accuracy.py --bench-profile plan` keeps each row in benchmark-results/plan-matrix.json).
Prints the table; --write puts it between the markers of docs/plan.md (<!-- plan-matrix:start --> and
<!-- plan-matrix:end -->); --check exits 1 when that block is not the one the file gives. Standard library only.
"""

import argparse
import json
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
RESULTS = PROJECT / "docs" / "plan-matrix.json"
START, END = "<!-- plan-matrix:start -->", "<!-- plan-matrix:end -->"
TOLERANCE = 0.15  # benchmarks/test_plan_accuracy.py's


def table(kept: dict) -> str:
    """A row per measured row, the fitted ones first, then a line counting the out-of-sample rows against the
    criterion (within TOLERANCE, or not estimated with the plan's reason)."""
    lines = ["| role | model | slice, layout | compute | batch x length | other | estimate, GiB | compiler, GiB | "
             "estimate / compiler | compile, s | measured |", "|" + "---|" * 11]
    rows = sorted(kept["rows"].values(), key=lambda result: (result["row"]["role"] != "fit", result["row"]["model"],
                                                               result["row"]["length"], result["row"]["batch"]))
    for result in rows:
        row = result["row"]
        frozen = " (frozen base float32)" if row.get("lora_frozen_float32") else ""
        other = ", ".join(part for part in (f"LoRA r={row['lora_r']}{frozen}" if row["lora_r"] else "",
                                            "checkpointed" if row["checkpointing"] else "") if part) or "-"
        estimate = f"not estimated: {result['estimate_why']}" if result["estimate_peak_gib"] is None \
            else f"{result['estimate_peak_gib']:.2f}"
        ratio = "-" if result["estimate_over_compiler"] is None else f"{result['estimate_over_compiler']:.2f}"
        lines.append(f"| {row['role']} | {row['model']} | {result['target']}, {row['layout']} | "
                     f"{'float32' if row['precision'] == 'no' else 'bf16'} | {row['batch']}x{row['length']} | {other} | "
                     f"{estimate} | {result['compiler_peak_gib']:.2f} | {ratio} | {result['compile_seconds']:.0f} | "
                     f"{result['measured']} |")
    checks = [result for result in rows if result["row"]["role"] == "check"]
    held = [result for result in checks if result["estimate_over_compiler"] is None
            or abs(result["estimate_over_compiler"] - 1) <= TOLERANCE]
    ratios = [result["estimate_over_compiler"] for result in checks if result["estimate_over_compiler"] is not None]
    spread = f"; estimate / compiler from {min(ratios):.2f} to {max(ratios):.2f}" if ratios else ""
    machines = sorted({result["machine"] for result in rows})
    lines += ["", f"Out of sample: {len(held)} of {len(checks)} rows within {TOLERANCE:.0%} of the compiler's peak or "
                  f"not estimated with the plan's reason{spread}. Measured on {', '.join(machines)}."]
    return "\n".join(lines)


def margins(kept: dict, floor: float = 0.05) -> dict:
    """By task, how far the estimate overstated the compiler's peak at most over every row (rounded up to a hundredth;
    at least `floor`, at most TOLERANCE): the margin a run's start gives the estimate (planning/start_check.py)."""
    found = {}
    for result in kept["rows"].values():
        if result["estimate_over_compiler"] is not None:
            over = result["estimate_over_compiler"] - 1
            found[result["task"]] = max(found.get(result["task"], floor), over)
    return {task: min(TOLERANCE, -(-round(over * 1e6) // 10 ** 4) / 100) for task, over in found.items()}


def block(results: Path = RESULTS) -> str:
    return "\n<!-- Written by scripts/plan_matrix.py --write docs/plan.md from docs/plan-matrix.json. -->\n\n" + \
        table(json.loads(results.read_text(encoding="utf-8"))) + "\n"


def held_block(text: str) -> str | None:
    start, end = text.find(START), text.find(END)
    return text[start + len(START): end] if 0 <= start < end else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="?", default=RESULTS, help="the results file (default: %(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", type=Path, metavar="DOC", help="replace the block between the markers in DOC")
    mode.add_argument("--check", type=Path, metavar="DOC", help="exit 1 when the block in DOC is not the file's")
    args = parser.parse_args(argv)
    made = block(args.results)
    for doc in filter(None, (args.write, args.check)):
        text = doc.read_text(encoding="utf-8")
        held = held_block(text)
        if held is None:
            print(f"{doc} has no {START} ... {END} block: add the markers first", file=sys.stderr)
            return 1
        if args.check and held.strip() != made.strip():
            print(f"{doc}'s matrix table is not {args.results.name}'s (python scripts/plan_matrix.py --write {doc})",
                  file=sys.stderr)
            return 1
        if args.write:
            start, end = text.index(START) + len(START), text.index(END)
            doc.write_text(text[:start] + made + text[end:], encoding="utf-8")
    if not (args.write or args.check):
        print(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
