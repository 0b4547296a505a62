"""Train on every host of a TPU pod with PyTorch/XLA's own multi-host runtime.

    python scripts/launch_pod.py --tpu-name NAME --zone ZONE --project PROJECT [--dry-run] [-- TRAINING OPTIONS]
    python scripts/launch_pod.py ... --entry predict -- --model M --input FILE --output PATH


(or set TPU_NAME, ZONE and PROJECT_ID). Copy this folder to every host and install it there
(one `gcloud` command for all workers each), then start the same training command on every
host: one `gcloud ... ssh --worker=I` per host, run side by side, each host's output prefixed
with `[worker I]`. With parallelism data each host's launcher starts one process per local chip;
with fsdp each host runs one process that drives all its chips (SPMD). The PJRT runtime joins the
hosts into one job. When a host fails, the others are stopped (they would wait for it
forever), the script names the host, and exits with its status.

`--entry predict` starts predict.py on every host the same way, with the same exit statuses: the model and the
input must be at the same path on every host (the copied folder, or storage they share); host 0 writes the output.

Why not `accelerate launch --tpu_cluster`: it imports torch_xla.distributed.xla_dist,
which torch_xla 2.1 removed. This is PyTorch/XLA's documented pod recipe instead.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
REMOTE_DIR = {{ cookiecutter.project_slug | tojson }}
BAKED_PARALLELISM = {{ cookiecutter.parallelism | tojson }}
{%- if cookiecutter.variants == "notebook" %}
ENTRY = ["-m", {{ (cookiecutter.project_slug ~ ".cli") | tojson }}]
{%- else %}
ENTRY = ["train.py"]
{%- endif %}
# --entry predict: predict.py (kept in every variant), started on the hosts exactly as the training command is.
ENTRIES = {"train": ENTRY, "predict": ["predict.py"]}
# What never travels: environments, caches and results are per host (and large).
NOT_COPIED = {".git", ".venv", "outputs", "__pycache__", ".pytest_cache", ".ruff_cache", ".benchmarks", "benchmark-results"}
# argument, environment variable, what it is
REQUIRED = (
    ("tpu_name", "TPU_NAME", "TPU name"),
    ("zone", "ZONE", "zone"),
    ("project", "PROJECT_ID", "project"),
)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Options after -- go to the training script.")
    parser.add_argument("--tpu-name", default=os.environ.get("TPU_NAME"), help="TPU name (default: $TPU_NAME)")
    parser.add_argument("--zone", default=os.environ.get("ZONE"), help="TPU zone, such as us-central2-b (default: $ZONE)")
    parser.add_argument("--project", default=os.environ.get("PROJECT_ID"), help="Google Cloud project (default: $PROJECT_ID)")
    parser.add_argument("--config", default="configs/tpu-vm.yaml", help="Accelerate config used on every host")
    parser.add_argument("--remote-dir", default=REMOTE_DIR, help="Folder on each host, relative to its home")
    parser.add_argument("--workers", type=int, help="Hosts in the pod (default: asked of `gcloud ... describe`)")
    parser.add_argument("--no-install", action="store_true", help="Skip `pip install -e '.[tpu]' -c constraints.txt` on the hosts")
    parser.add_argument("--dry-run", action="store_true", help="Print the gcloud commands instead of running them")
    parser.add_argument("--entry", choices=list(ENTRIES), default="train",
                        help="What the hosts run: train (train.py, the default) or predict (predict.py)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then options for the training (or predict) script")
    args = parser.parse_args(argv)
    if args.train_args[:1] == ["--"]:
        args.train_args = args.train_args[1:]
    return args


def missing(args: argparse.Namespace) -> list[str]:
    return [f"--{name.replace('_', '-')}/${variable}" for name, variable, _ in REQUIRED if not getattr(args, name)]


def files_to_copy(root: Path = PROJECT) -> list[str]:
    return sorted(
        entry.name for entry in root.iterdir() if entry.name not in NOT_COPIED and not entry.name.endswith(".egg-info")
    )


def gcloud(verb: str, args: argparse.Namespace, *operands: str, worker="all") -> list[str]:
    target = ["--zone", args.zone, "--project", args.project, f"--worker={worker}"]
    return ["gcloud", "compute", "tpus", "tpu-vm", verb, *operands, *target]


def on_workers(args: argparse.Namespace, command: str, worker="all") -> list[str]:
    return gcloud("ssh", args, args.tpu_name, f"--command={command}", worker=worker)


def describe(args: argparse.Namespace) -> list[str]:
    return ["gcloud", "compute", "tpus", "tpu-vm", "describe", args.tpu_name,
            "--zone", args.zone, "--project", args.project, "--format=json"]


def count_workers(args: argparse.Namespace) -> int:
    """Hosts in the pod: one network endpoint each in `gcloud ... describe`."""
    found = subprocess.run(describe(args), capture_output=True, text=True)
    if found.returncode != 0:
        reason = (found.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: cannot describe TPU {args.tpu_name!r} ({reason}); name the hosts with --workers N")
    return len(json.loads(found.stdout).get("networkEndpoints") or [None])


def setup_steps(args: argparse.Namespace, root: Path = PROJECT) -> list[tuple[str, list[str]]]:
    """Copy and install, each one command for all workers, as (name, argv); run from the project folder."""
    remote = shlex.quote(args.remote_dir)
    steps = [
        ("make the folder", on_workers(args, f"mkdir -p {remote}")),
        ("copy", gcloud("scp", args, "--recurse", *files_to_copy(root), f"{args.tpu_name}:{args.remote_dir}")),
    ]
    if not args.no_install:
        steps.append(("install", on_workers(args, f'cd {remote} && python3 -m pip install -e ".[tpu]" -c constraints.txt')))
    return steps


def parallelism(train_args: list[str]) -> str:
    """The layout the training command will use: its --parallelism, else the baked default."""
    for index, arg in enumerate(train_args):
        if arg.startswith("--parallelism="):
            return arg.split("=", 1)[1]
        if arg == "--parallelism" and index + 1 < len(train_args):
            return train_args[index + 1]
    return BAKED_PARALLELISM


def train_commands(args: argparse.Namespace, workers) -> list[list[str]]:
    """One ssh per host, so that each host's exit status is its own.

    data: Accelerate's launcher starts one process per chip on each host. fsdp: one plain process per host
    drives all of that host's chips (SPMD); a launcher would start one per chip, each seeing one device.
    """
    if parallelism(args.train_args) == "fsdp":
        launch = ["python3", *ENTRIES[args.entry], *args.train_args]
    else:
        # `python3 -m accelerate.commands.launch` is `accelerate launch` without relying on PATH over ssh.
        launch = ["python3", "-m", "accelerate.commands.launch", "--config_file", args.config, *ENTRIES[args.entry],
                  *args.train_args]
    command = f"cd {shlex.quote(args.remote_dir)} && PJRT_DEVICE=TPU {shlex.join(launch)}"
    return [on_workers(args, command, worker=worker) for worker in workers]


def _relay(worker, stream, out) -> None:
    for line in stream:
        print(f"[worker {worker}] {line}", end="", file=out, flush=True)


def train_on_every_host(commands: list[list[str]]) -> int:
    """Start every host's training; on the first failure stop the others. Returns the exit status."""
    processes = [
        subprocess.Popen(argv, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv in commands
    ]
    relays = [
        threading.Thread(target=_relay, args=(worker, stream, out), daemon=True)
        for worker, process in enumerate(processes)
        for stream, out in ((process.stdout, sys.stdout), (process.stderr, sys.stderr))
    ]
    for relay in relays:
        relay.start()
    failed = None
    while failed is None:
        # The first host that ended with a non-zero status, once every host ended or one failed.
        failed = next((worker for worker, process in enumerate(processes) if process.poll()), None)
        if all(process.poll() is not None for process in processes):
            break
        time.sleep(0.2)
    if failed is not None:
        # The other hosts would wait for the failed one in their next collective, forever.
        for process in processes:
            if process.poll() is None:
                process.terminate()
    for process in processes:
        process.wait()
    for relay in relays:
        relay.join()
    if failed is None:
        return 0
    code = processes[failed].returncode
    stopped = [str(worker) for worker, process in enumerate(processes) if process.returncode < 0]
    others = f"; stopped worker(s) {', '.join(stopped)}" if stopped else ""
    print(f"error: training failed on worker {failed} of {len(processes)} (exit code {code}){others}; "
          f"its output is above, prefixed [worker {failed}]", file=sys.stderr)
    return code


def main(argv=None) -> int:
    args = parse(argv)
    absent = missing(args)
    if absent:
        print(f"error: name the TPU to launch on; missing {', '.join(absent)}", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers={args.workers}: must be a positive whole number", file=sys.stderr)
        return 2
    steps = setup_steps(args)
    if args.dry_run:
        for _, argv_ in steps:
            print(shlex.join(argv_))
        if args.workers is None:
            print(shlex.join(describe(args)))
        for argv_ in train_commands(args, range(args.workers) if args.workers else ["<each worker>"]):
            print(shlex.join(argv_))
        return 0
    if shutil.which("gcloud") is None:
        print("error: gcloud is not on PATH; install the Google Cloud CLI or use --dry-run", file=sys.stderr)
        return 2
    for name, argv_ in steps:
        print(f"[{name}] {shlex.join(argv_)}", flush=True)
        code = subprocess.run(argv_, cwd=PROJECT).returncode
        if code != 0:
            print(f"error: step '{name}' failed with exit code {code}", file=sys.stderr)
            return code
    workers = args.workers or count_workers(args)
    print(f"[train] on {workers} worker(s)", flush=True)
    return train_on_every_host(train_commands(args, range(workers)))


if __name__ == "__main__":
    sys.exit(main())
