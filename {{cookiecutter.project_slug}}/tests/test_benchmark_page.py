"""docs/benchmarks.md, its pictures and its full tables are what docs/reference-results.json draws, figure for figure.

The results file is the template's reference run (its date, machine and device are on the page); benchmarks/page.py
draws the page from it and from nothing else. Fast: no device, no training.
"""

import copy
import json

import pytest
from conftest import PROJECT, TASK

from benchmarks import answers, findings, page, page_figures, results_file
from benchmarks.records import with_unit

DOCS = PROJECT / "docs"


@pytest.fixture(scope="module")
def reference() -> dict:
    return results_file.load(PROJECT / results_file.REFERENCE)


def test_the_page_and_its_full_tables_are_what_the_reference_results_draw(reference):
    assert (DOCS / page.PAGE_NAME).read_text() == page.page(reference, reference=True), (
        "docs/benchmarks.md differs from what docs/reference-results.json draws: python -m benchmarks.page --reference")
    assert (DOCS / page.TABLES_NAME).read_text() == page.tables(reference)


def test_the_page_opens_with_the_two_answers_each_a_table_of_at_most_8_rows_and_a_picture_in_docs(reference):
    found = answers.answers(results_file.records(reference))
    assert [answer.key for answer in found] == (["padding", "precision"] if TASK == "causal-lm" else
                                                ["eval-batching", "precision"])
    text = (DOCS / page.PAGE_NAME).read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == [f"## {answer.question}" for answer in found]
    for answer in found:
        assert 1 <= len(answer.rows) <= 8 and all(len(row) == len(answer.header) for row in answer.rows)
        picture = DOCS / page.picture_name(answer)
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # The picture plots the file's numbers (held to them through the numbers it carries, not its pixels).
        assert page_figures.read_plotted(picture) == page_figures.plotted(answer)
    assert reference["made"] in text and reference["machine"] in text and "device " in text


def test_a_figure_that_differs_from_the_file_is_found(reference):
    """The check can fail: one changed value in the file changes the page it draws."""
    changed = copy.deepcopy(reference)
    record = next(entry for entry in changed["records"] if entry["group"] == "precision: fine-tuning")
    record["extra_info"]["fraction_changed"] = 0.123
    assert page.page(changed, reference=True) != (DOCS / page.PAGE_NAME).read_text()


def test_every_column_of_the_answers_says_its_unit(reference):
    unitless = {"eval batching", "level", "set by", "in the graph", "padding", "same TPU program as"}
    for answer in answers.answers(results_file.records(reference)):
        for header in answer.header:
            assert header in unitless or "(" in header or header.startswith(("eval graphs", "graphs")) or \
                header == "examples counted", header
    assert with_unit("steady_step_s") == "steady_step_s (s)" and with_unit("wall_vs_project") == "wall_vs_project (x)"
    assert with_unit("tracing_ms") == "tracing_ms (ms)" and with_unit("peak_gib") == "peak_gib (GiB)"


@pytest.mark.parametrize(("value", "spread", "noise"), [
    (0.84, "0.823-0.908", False),  # the rounds stay on one side of 1, farther from it than they spread
    (1.02, "0.95-1.10", True),  # the rounds reach past 1
    (0.973, None, True),  # one run each: within ONE_RUN of 1
    (2.8, None, False),
])
def test_a_timing_ratio_within_its_spread_of_1_reads_as_noise(value, spread, noise):
    assert ("within noise" in findings.ratio(value, spread)) is noise


def test_your_run_s_page_shows_the_reference_s_answers_beside_its_own(reference, tmp_path):
    yours = copy.deepcopy(reference)
    yours["made"] = "2030-01-01 00:00 UTC"
    written = page.write(yours, tmp_path, reference=False, beside=reference)
    text = written["page"].read_text()
    assert text.startswith("# Benchmarks at a glance") and "This run: " in text and "2030-01-01" in text
    assert text.count("The reference run's answer") == 2 and reference["made"] in text
    assert all(path.is_file() for path in written.values())
    # The results file itself is plain data: JSON, read without running anything.
    assert json.loads((PROJECT / results_file.REFERENCE).read_text())["format"] == results_file.FORMAT


@pytest.mark.parametrize(("flags", "xla_flags", "said"), [
    # An Intel Xeon of this project's machines (Sapphire Rapids): AVX-512 with bf16 instructions.
    ("fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "", "512-bit vectors, bf16 instructions amx_bf16 and "
     "avx512_bf16"),
    # The same CPU with XLA:CPU's code capped at AVX2 (make flaky's other-CPU run).
    ("fpu sse2 avx avx2 avx512f avx512_bf16", "--xla_backend_optimization_level=0 --xla_cpu_max_isa=AVX2",
     "512-bit vectors, bf16 instructions avx512_bf16, XLA:CPU capped at AVX2 (256-bit vectors) by XLA_FLAGS, as another "
     "CPU would run"),
    # An older CPU: no bf16 in its flags.
    ("fpu sse2 avx avx2 fma", "", "256-bit vectors, no bf16 instructions in its flags"),
])
def test_what_the_page_says_of_the_cpu_is_read_from_its_flags(reference, flags, xla_flags, said):
    """The page names the CPU's vectors and bf16 instructions from the flags the run recorded, and says nothing of
    them for a run that recorded none (the reference before they were recorded)."""
    found = results_file.cpu(flags=flags, xla_flags=xla_flags)
    assert results_file.cpu_words(found) == said
    run = copy.deepcopy(reference)
    run["cpu"] = found
    assert f"{run['machine']} ({said})" in page.about(run, "This run")
    run.pop("cpu")
    assert f"on {run['machine']}, Python" in page.about(run, "This run")
    assert isinstance(results_file.cpu(), dict)  # this machine's, as every run records it
