"""Reproduce the gloo workers' start-up hang fast: notebook_launcher's rendezvous alone, hundreds of times.

tools/repro_gloo_hang.py runs the chip-count test's whole driver (about 33 s a launch); the hang is at start-up, so
this runs the same imports and the same `notebook_launcher` call with workers that only join the gloo group and pass
one barrier (about 0.4 s a launch). A launch with no progress for --stall seconds is dumped with repro_gloo_hang's
dump_hung (py-spy and gdb stacks of every process, sockets, the master port's listener), killed, and counted.
Measured here without the wait the package's training_function makes (processes.wait_for_forked_siblings): 8 hangs in
870 launches (1 in 468 on a quiet machine, about 1 in 10 with the machine loaded); with `--wait` (that wait, then in the
tests' driver): none in 832.

    .venv/bin/python tools/gloo_startup_stress.py build/demo/tpu_text_classifier --launches 500 [--wait]
"""

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
# The child: the driver's imports, then `launches` launches, a heartbeat line before each (launch, port).
CHILD = """
import sys; sys.modules['torch_xla'] = None
import socket
from accelerate import Accelerator, notebook_launcher
project, processes, launches, beat, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, project)
package = next(path.parent.parent.name for path in __import__("pathlib").Path(project).glob("*/loop/training.py"))
__import__(f"{package}.loop.training")  # what the tests' driver imports before it forks

def run():
    if wait == "1":  # the package's workaround: connect only once the launcher has forked every worker
        __import__(f"{package}.processes", fromlist=["processes"]).wait_for_forked_siblings()
    accelerator = Accelerator(cpu=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()

for index in range(launches):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with open(beat, "a") as out:
        out.write(f"{index} {port}\\n")
    notebook_launcher(run, (), num_processes=processes, use_port=str(port))
"""


def repro():
    spec = importlib.util.spec_from_file_location("repro_gloo_hang", TOOLS / "repro_gloo_hang.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path, help="a baked project folder")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--stall", type=float, default=60, help="seconds without a new launch that count as a hang")
    parser.add_argument("--wait", action="store_true", help="with the package's wait for the siblings' fork (processes.wait_for_forked_siblings)")
    parser.add_argument("--out", type=Path, default=Path("gloo-startup-stress"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PJRT_DEVICE", None)
    started = hangs = rounds = 0
    while started < args.launches:
        rounds += 1
        beat = args.out / f"beat-{rounds}.txt"
        beat.write_text("")
        command = [sys.executable, "-c", CHILD, str(args.project.resolve()), str(args.processes),
                   str(args.launches - started), str(beat), "1" if args.wait else "0"]
        with (args.out / f"stderr-{rounds}.txt").open("w") as errors:
            child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
            last, since = "", time.monotonic()
            while child.poll() is None:
                time.sleep(1)
                text = beat.read_text()
                if text != last:
                    last, since = text, time.monotonic()
                elif time.monotonic() - since > args.stall:
                    port = int(text.split()[-1])
                    folder = args.out / f"hang-{rounds}"
                    folder.mkdir()
                    info = repro().dump_hung(child.pid, port, folder, folder)
                    hangs += 1
                    print(f"hung at launch {started + len(text.splitlines())}: {info}", flush=True)
                    os.killpg(child.pid, signal.SIGKILL)
                    break
            child.wait()
        started += len(beat.read_text().splitlines())
        if child.returncode not in (0, -signal.SIGKILL):
            sys.exit(f"the driver failed ({child.returncode}): see {args.out}/stderr-{rounds}.txt")
    print(f"launches {started}, hung {hangs}; processes {args.processes}; wait {args.wait}; dumps in {args.out}")


if __name__ == "__main__":
    main()
