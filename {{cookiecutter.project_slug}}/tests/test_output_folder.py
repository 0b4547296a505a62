"""A second run into a used --output_dir: refused without --resume (it would overwrite metrics.jsonl and keep the
earlier run's checkpoints beside its own), or started over with --overwrite_output_dir. The loop's machinery."""

import json

import pytest
from conftest import python_command, quick, run, train_in_workers

pytestmark = pytest.mark.machinery


def an_earlier_run(output):
    """What a finished three-epoch run leaves (its files as the loop writes them, made here without training)."""
    (output / "checkpoints" / "epoch-3").mkdir(parents=True)
    (output / "checkpoints" / "epoch-3" / "progress.json").write_text("{}")
    (output / "metrics.jsonl").write_text(json.dumps({"step": 90, "loss": 0.1}) + "\n")
    (output / "best-model").mkdir()  # its best evaluation's weights (--load_best_model_at_end)
    (output / "best-model" / "weights.pt").write_bytes(b"weights")
    return {path: path.read_bytes() for path in output.rglob("*") if path.is_file()}


def test_a_used_output_dir_is_refused_without_resume_and_left_as_it_was(tmp_path):
    output = tmp_path / "outputs"
    before = an_earlier_run(output)
    result = run(python_command("--output_dir", str(output), *quick()), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: output_dir={str(output)!r} holds an earlier run (checkpoints, metrics.jsonl): --resume continues it, "
        "--overwrite_output_dir starts over (removes its results), or give another --output_dir"
    )
    assert {path: path.read_bytes() for path in output.rglob("*") if path.is_file()} == before


def test_resume_and_overwrite_together_are_refused(tmp_path):
    result = run(python_command("--output_dir", str(tmp_path), *quick(), "--resume", "--overwrite_output_dir"),
                 check=False)
    assert result.returncode == 2
    assert "resume=True and overwrite_output_dir=True: give one of the two" in result.stderr


@pytest.mark.slow
def test_overwrite_output_dir_starts_over(tmp_path):
    output = tmp_path / "outputs"
    an_earlier_run(output)
    run(python_command("--output_dir", str(output), *quick(), "--overwrite_output_dir", "--report_to", "none"))
    assert sorted(path.name for path in (output / "checkpoints").iterdir() if path.is_dir()) == ["epoch-1"]
    logged = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert logged and all(line["step"] != 90 for line in logged)
    assert json.loads((output / "report.json").read_text())["epochs"] == 1
    assert not (output / "best-model").exists()  # an earlier run's best weights are no export of this one


@pytest.mark.slow
@pytest.mark.workers
def test_two_gloo_workers_stop_at_a_used_output_dir_and_start_over_when_told(tmp_path):
    """Every process refuses the used folder (none writes before the check), and with --overwrite_output_dir one
    process per host removes the earlier run while the other waits at the rendezvous."""
    output = tmp_path / "outputs"
    before = an_earlier_run(output)
    _, refused, _ = train_in_workers(tmp_path, 2, *quick(), check=False)
    assert refused.returncode != 0
    assert "holds an earlier run (checkpoints, metrics.jsonl): --resume continues it" in refused.stdout + refused.stderr
    assert {path: path.read_bytes() for path in output.rglob("*") if path.is_file()} == before
    report, _, _ = train_in_workers(tmp_path, 2, *quick(), "--overwrite_output_dir", "--report_to", "none")
    assert report["num_processes"] == 2
    assert sorted(path.name for path in (output / "checkpoints").iterdir() if path.is_dir()) == ["epoch-1"]
