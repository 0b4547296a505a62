"""Data at size: the project's preparation of a real corpus against transformers' example script{{ " and TRL's packing" if cookiecutter.task == "causal-lm" else "" }}, at 1 MB
(the quick profile: the example pipeline{{ ", TRL's default packing" if cookiecutter.task == "causal-lm" else "" }} and the project, cold and again) and at 1, 50 and 200 MB with every row
(`--bench-profile data`). measure_data_at_size.py says what each row does and how time and memory are measured.

The figures are the report's: seconds, real tokens per second, the tree's peak memory, the project's second run, and
the ratios (the project's seconds over the example pipeline's, second run over first, the peak's growth from the
smallest size). What is asserted is exact: what was prepared, and that the row counts and tokens agree.
"""

import pytest

from . import isolation, profiles
from .measure_data_at_size import (
    LENGTH,
    QUICK_ROWS,
    ROWS,
    SIZES,
    WORKERS,
    build_model_folder,
    has_streaming,
    measure,
    preload,
    write_corpus,
)

GROUP = "data at size"
REFERENCE = "example-pipeline"


def pytest_generate_tests(metafunc):
    if "size" in metafunc.fixturenames:
        profile = profiles.choose(metafunc.config.getoption("--bench-profile"))
        rows = ROWS if profile.data_all_rows else QUICK_ROWS
        cases = [(size, row) for size in profile.data_sizes for row in rows]
        metafunc.parametrize(("size", "row"), cases, ids=[f"{size}-{row}" for size, row in cases])


@pytest.fixture(scope="session")
def data_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("data-at-size")


@pytest.fixture(scope="session")
def model_folder(data_folder) -> tuple[str, dict]:
    """The tokenizer and tiny model, built once (in a child: the session never runs torch)."""
    preload()  # what the rows import, once here, for every forked row to inherit
    folder = data_folder / "model"
    return str(folder), isolation.run(build_model_folder, str(folder))


@pytest.fixture(scope="session")
def measured() -> dict:
    """(size, row) -> its figures, and size -> its corpus: filled as the rows run."""
    return {"corpora": {}}


def corpus(measured: dict, data_folder, size: str) -> dict:
    if size not in measured["corpora"]:
        measured["corpora"][size] = write_corpus(data_folder / size, size)
    return measured["corpora"][size]


@pytest.mark.benchmark(group=GROUP)
def test_data_at_size(benchmark, data_folder, model_folder, measured, size, row):
    model, tokenizer_facts = model_folder
    files = corpus(measured, data_folder, size)
    benchmark.extra_info.update(
        headline="seconds", size=size, row=row, workers=WORKERS, max_seq_length=LENGTH, **tokenizer_facts,
        **{key: value for key, value in files.items() if not key.endswith("_file")},
    )
    if row == "project-streaming" and not has_streaming():
        # A project baked before TrainConfig had `streaming` (measure_data_at_size._project_streaming needs it).
        benchmark.extra_info["reason"] = "TrainConfig has no streaming field yet"
        pytest.skip("TrainConfig has no streaming field yet: the project-streaming row waits for it")
    cache = data_folder / "caches" / f"{size}-{row}"
    result = benchmark.pedantic(measure, args=(row, files, model, cache), rounds=1, iterations=1)
    if row == "project":  # again, in a fresh process, on the same data and cache
        second = measure(row, files, model, cache)
        result.update(second_run_seconds=second["seconds"], second_run_vs_first=second["seconds"] / result["seconds"],
                      second_run_from_cache=second["from_cache"], second_run_peak_uss_bytes=second["peak_uss_bytes"],
                      second_run_train_tokens=second["train_tokens"])
    measured[size, row] = result
    reference, smallest = measured.get((size, REFERENCE)), measured.get((min(SIZES, key=SIZES.get), row))
    if reference and row != REFERENCE:
        result["seconds_vs_example_pipeline"] = result["seconds"] / reference["seconds"]
    if smallest and smallest is not result:
        result["peak_uss_vs_smallest_size"] = result["peak_uss_bytes"] / smallest["peak_uss_bytes"]
        result["peak_pss_vs_smallest_size"] = result["peak_pss_bytes"] / smallest["peak_pss_bytes"]
        # The target's figure: how much more memory the larger corpus took (the heap alone beside it).
        result["peak_uss_growth_bytes"] = result["peak_uss_bytes"] - smallest["peak_uss_bytes"]
        result["peak_heap_growth_bytes"] = result["peak_heap_bytes"] - smallest["peak_heap_bytes"]
    benchmark.extra_info.update(result)

    assert result["train_rows"] > 0 and result["train_tokens"] > 0 and result["eval_rows"] > 0
{%- if cookiecutter.task == "causal-lm" %}
    if row == "project-streaming":
        assert result["train_tokens"] == result["train_rows"] * LENGTH
        if reference:  # each run of 1000 texts (and their EOS) cut on its own: under LENGTH tokens lost in each
            lost = reference["tokens_before_packing"] + files["train_file_rows"] - result["train_tokens"]
            assert 0 <= lost < LENGTH * -(-files["train_file_rows"] // 1000)
        return
{%- endif %}
    assert not result["from_cache"]  # a fresh cache: everything was prepared
    if row == "project":
        assert result["second_run_from_cache"], "the second run prepared again instead of reading datasets' cache"
        assert result["second_run_train_tokens"] == result["train_tokens"]
{%- if cookiecutter.task == "causal-lm" %}
    if "tokens_before_packing" in result:  # every text tokenized, before the blocks were cut
        assert result["texts"] == files["train_file_rows"]
    if row in (REFERENCE, "project"):  # blocks of LENGTH real tokens, no padding
        assert result["train_tokens"] == result["train_rows"] * LENGTH
    if row == REFERENCE:
        # run_clm cuts each map batch of 1000 texts (per worker) on its own: at most LENGTH - 1 tokens lost in each.
        lost = result["tokens_before_packing"] - result["train_tokens"]
        assert 0 <= lost < LENGTH * (-(-result["texts"] // 1000) + WORKERS)
    if row == "trl-pack-wrapped":  # joined and cut per batch, the short last piece kept: no token lost
        assert result["train_tokens"] == result["tokens_before_packing"]
    if row == "trl-pack-bfd":  # long texts cut at LENGTH, their overflow dropped
        assert result["train_tokens"] <= result["tokens_before_packing"]
    if row == "project" and reference:
        # The same tokens (the tokenizer adds no special token) plus the project's EOS after every text, joined once
        # and cut once: only the short last block dropped.
        joined = reference["tokens_before_packing"] + files["train_file_rows"]
        assert result["train_tokens"] == joined // LENGTH * LENGTH
{%- else %}
    if row == "project" and reference:
        # The same texts, each [CLS] text [SEP] cut at LENGTH: the project leaves padding to the collator.
        assert result["train_rows"] == reference["train_rows"] == files["train_file_rows"]
        assert result["train_tokens"] == reference["train_tokens"]
        assert result["eval_rows"] == reference["eval_rows"]
{%- endif %}
