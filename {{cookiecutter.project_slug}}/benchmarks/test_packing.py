"""Packed blocks against one text per row: graphs, padding and speed of the causal-LM task's three layouts.

fixed packs every text into blocks of max_seq_length tokens (one shape, no padding); longest pads every text
to the longest one (one shape, mostly padding); dynamic pads each batch to its longest text (a new shape
almost every batch). Each is a run of the project's command line on the demo, read from its report.
"""

import pytest

from .project_runs import run_project

LAYOUTS = ("fixed", "longest", "dynamic")
RESULTS = {}


@pytest.mark.benchmark(group="causal-lm: packing")
@pytest.mark.parametrize("padding", LAYOUTS)
def test_packing(benchmark, profile, tmp_path, padding):
    report = benchmark.pedantic(run_project, args=(
        tmp_path / "outputs", "--demo", "true", "--padding", padding, "--max_seq_length", str(profile.max_seq_length),
        # The steady speed is read from the epochs after the first, so two epochs; of the profile's number of
        # examples, since the demo's whole epoch of 'longest' rows cost the quick suite 47 s.
        "--num_epochs", str(profile.compare_epochs), "--max_train_examples", str(profile.compare_train_examples),
        "--mixed_precision", "no", "--checkpoint", "false",
        "--export", "false",
    ), rounds=1, iterations=1)
    RESULTS[padding] = report
    benchmark.extra_info.update(
        headline="steady_tokens_per_second", padding=padding, compilations=report["xla_compilations"],
        recompilations=report["recompilations"], train_padding_fraction=report["train_padding_fraction"],
        steady_tokens_per_second=report["steady_tokens_per_second"], train_rows=report["train_examples"],
        eval_perplexity=report["eval_perplexity"], device=report["device"],
    )
    if padding == "fixed":
        assert report["train_padding_fraction"] == 0 and report["recompilations"] == 0
    if padding == "longest":
        assert report["train_padding_fraction"] > 0 and report["recompilations"] == 0
    if padding == "dynamic" and "fixed" in RESULTS:
        assert report["xla_compilations"] > RESULTS["fixed"]["xla_compilations"]
