"""tools/flaky.py (make flaky) names each failing test of a round, and counts a round with nothing selected as clean."""

import textwrap

from tests.baking import load_tool

flaky = load_tool("flaky")

SUITE = textwrap.dedent("""
    import pytest

    @pytest.mark.machinery
    def test_holds():
        pass

    @pytest.mark.machinery
    def test_breaks():
        assert 1 == 2

    def test_not_machinery():
        assert False
""")


def project_with(tmp_path, source: str):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    machinery: the loop's machinery\n")
    return tmp_path


def test_a_round_names_each_failing_test_it_selected(tmp_path):
    seconds, summary, failed = flaky.run_round(project_with(tmp_path, SUITE), "machinery", workers=1)
    assert failed == ["tests/test_suite.py::test_breaks"]
    assert summary.startswith("1 failed, 1 passed, 1 deselected") and seconds > 0


def test_a_round_that_selects_nothing_is_clean(tmp_path):
    _, summary, failed = flaky.run_round(project_with(tmp_path, "def test_other():\n    pass\n"), "machinery",
                                         workers=1)
    assert failed == [] and "deselected" in summary


def test_a_round_runs_its_tests_with_the_xla_flags_it_was_given(tmp_path):
    """The other-CPU round (make flaky): every test sees the flag, so every run it starts compiles for that CPU."""
    seen = textwrap.dedent("""
        import os
        import pytest

        @pytest.mark.machinery
        def test_sees_the_flag():
            assert os.environ["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2"
    """)
    _, summary, failed = flaky.run_round(project_with(tmp_path, seen), "machinery", workers=1,
                                         xla_flags="--xla_cpu_max_isa=AVX2")
    assert failed == [] and summary.startswith("1 passed"), summary
