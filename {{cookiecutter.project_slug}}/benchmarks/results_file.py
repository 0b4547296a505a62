"""A benchmark run as one plain JSON file: when and where it ran, and each benchmark's record.

Every run of the suite writes benchmark-results/results.json; the template's reference run, made when the template
is released, is committed as docs/reference-results.json. The page (page.py) and its pictures are drawn from such
a file and from nothing else, so that a test can hold every figure on the page to it. Plain data only: reading it
runs no code.
"""

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from .records import Record

RESULTS_NAME = "results.json"
REFERENCE = Path("docs") / "reference-results.json"
FORMAT = 1


def _cpuinfo(field: str) -> str:
    """The first CPU's `field` in /proc/cpuinfo (Linux), or '' where there is none."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.partition(":")[0].strip() == field:
                return line.partition(":")[2].strip()
    return ""


def machine() -> str:
    """'AMD EPYC 7B13, 2 cores': the CPU's model name (from /proc/cpuinfo where Linux has it) and its cores."""
    return f"{_cpuinfo('model name') or platform.processor() or platform.machine()}, {os.cpu_count()} cores"


# The widest vectors a CPU flag allows, widest first (x86's names as /proc/cpuinfo lists them).
VECTOR_FLAGS = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("asimd", 128))
# The instruction sets XLA:CPU may be capped at (XLA_FLAGS --xla_cpu_max_isa, as `make flaky`'s other-CPU run sets it),
# and the vectors each allows.
ISA_VECTOR_BITS = {"SSE4_2": 128, "AVX": 256, "AVX2": 256, "AVX512": 512, "AVX512_VNNI": 512, "AVX512_BF16": 512,
                   "AMX": 512, "AMX_FP16": 512}


def cpu(flags: str | None = None, xla_flags: str | None = None) -> dict:
    """What a page may say of the CPU, read from it: the widest vectors its flags allow, its bf16 instructions (the
    flags naming bf16: avx512_bf16, amx_bf16), and the instruction set XLA:CPU was capped at in this run (None: none).
    Empty where the CPU lists no flags (not Linux)."""
    flags = (_cpuinfo("flags") or _cpuinfo("Features")) if flags is None else flags
    xla_flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    if not flags:
        return {}
    names = set(flags.split())
    capped = next((flag.partition("=")[2] for flag in xla_flags.split() if flag.startswith("--xla_cpu_max_isa=")),
                  None)
    return {"vector_bits": next((bits for flag, bits in VECTOR_FLAGS if flag in names), None),
            "bf16_instructions": sorted(name for name in names if "bf16" in name),
            "xla_cpu_max_isa": capped}


def cpu_words(found: dict) -> str:
    """'512-bit vectors, bf16 instructions avx512_bf16 and amx_bf16': a results file's cpu, as the page says it
    ('' for a file that has none: a run before it was recorded says nothing of its CPU)."""
    if not found:
        return ""
    bf16 = found.get("bf16_instructions") or []
    words = [f"{found['vector_bits']}-bit vectors" if found.get("vector_bits") else "vector width not listed",
             "bf16 instructions " + " and ".join(bf16) if bf16 else "no bf16 instructions in its flags"]
    if found.get("xla_cpu_max_isa"):
        isa = found["xla_cpu_max_isa"]
        bits = ISA_VECTOR_BITS.get(isa.upper())
        words.append(f"XLA:CPU capped at {isa}" + (f" ({bits}-bit vectors)" if bits else "")
                     + " by XLA_FLAGS, as another CPU would run")
    return ", ".join(words)


def as_dict(records, *, profile: str, wall_s: float | None, made: datetime | None = None) -> dict:
    """The file's contents for `records` of a run of `profile` that took `wall_s` seconds."""
    made = made or datetime.now(timezone.utc)
    devices = sorted({str(record.extra_info["device"]) for record in records if record.extra_info.get("device")})
    return {
        "format": FORMAT,
        "made": made.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "cpu": cpu(),
        "python": platform.python_version(),
        "devices": devices,
        "profile": profile,
        "suite_wall_s": None if wall_s is None else round(wall_s, 1),
        "records": [{"group": record.group, "name": record.name, "outcome": record.outcome, "wall_s": record.wall_s,
                     "extra_info": record.extra_info} for record in records],
    }


def save(records, folder: Path, **run) -> Path:
    path = Path(folder) / RESULTS_NAME
    path.write_text(json.dumps(as_dict(records, **run), indent=1, sort_keys=True, default=str) + "\n")
    return path


def merged(*runs: dict) -> dict:
    """Several runs of one project as one (the suite, then its timed benchmarks alone): the first run's description,
    every run's records, their wall times added."""
    first = dict(runs[0])
    first["records"] = [record for run in runs for record in run["records"]]
    walls = [run.get("suite_wall_s") for run in runs]
    first["suite_wall_s"] = None if None in walls else round(sum(walls), 1)
    first["devices"] = sorted({device for run in runs for device in run.get("devices", [])})
    return first


def load(path: Path) -> dict:
    run = json.loads(Path(path).read_text())
    if run.get("format") != FORMAT:
        raise ValueError(f"{path}: not a results file of format {FORMAT} (written by benchmarks/results_file.py)")
    return run


def records(run: dict) -> list[Record]:
    return [Record(group=entry["group"], name=entry["name"], outcome=entry["outcome"], wall_s=entry.get("wall_s"),
                   extra_info=entry.get("extra_info", {})) for entry in run["records"]]
