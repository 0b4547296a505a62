"""tools/update_readme_results.py's demo section: the picture the demo run drew, shown by the README."""

import json
from pathlib import Path

from tests.baking import load_tool

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


def tool():
    return load_tool("update_readme_results")


def test_the_readme_shows_the_committed_picture_of_the_demo_run():
    text, picture = (ROOT / "README.md").read_text(), tool().DEMO_PICTURE
    section = text.partition("<!-- demo:start -->")[2].partition("<!-- demo:end -->")[0]
    assert f"]({picture})" in section and "flops  " in section
    assert (ROOT / picture).read_bytes()[:8] == PNG


def test_the_demo_section_copies_the_run_s_picture_and_quotes_its_report(tmp_path):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "curves.png").write_bytes(PNG + b"the run's own picture")
    report = {"device": "xla:CPU", "epochs": 3, "eval_loss": 0.09617, "eval_accuracy": 1.0,
              "learning_rate": {"optimizer_steps": 90}, "flops": {"model_flops_per_token": 624780, "why_no_mfu": "why"},
              "logging": {"logging_steps": 10, "logs": 9, "metrics_file": "outputs/metrics.jsonl"}}
    (outputs / "report.json").write_text(json.dumps(report))
    readme = tmp_path / "README.md"
    readme.write_text("# t\n\n<!-- demo:start -->\nold\n<!-- demo:end -->\n\nafter\n")
    module = tool()
    module.update(readme, tmp_path / "no-results", outputs)
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- demo:end -->\n\nafter\n")
    assert "90 optimizer steps, a log every 10 steps (9 logs in outputs/metrics.jsonl)" in text
    assert "flops  model_flops_per_token=624780, why_no_mfu=why" in text
    assert (tmp_path / module.DEMO_PICTURE).read_bytes() == PNG + b"the run's own picture"
    # Without a demo run the section stays as it was.
    module.update(readme, tmp_path / "no-results", tmp_path / "nothing")
    assert readme.read_text() == text
