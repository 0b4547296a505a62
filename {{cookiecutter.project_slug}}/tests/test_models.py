"""The architecture matrix: your own model, at your chip count.

Tiny random-weight models of the architectures people bring (built from transformers' config classes, written with
save_pretrained next to the project's demo tokenizer: no hub) train through train.py on the shipped demo files in
both layouts: data (one device) and fsdp (two SPMD devices). Each must compile its 2 graphs and no more, read the
device only at the epoch's end, learn (its eval loss below the untrained model's on the host, in float32), learn the
same in both layouts, and export a folder that from_pretrained loads. The rows are written for the template's
docs/models.md table when MODEL_MATRIX_RESULTS names a folder.

It compares the layouts, so it runs in an fsdp project (tests/conftest.py); a data project leaves it to that one.
"""

import model_matrix as parts
import pytest
from model_matrix import ARCHITECTURES, LAYOUTS

pytestmark = [pytest.mark.xla, pytest.mark.slow, pytest.mark.layout("fsdp")]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    """{(architecture, layout): Row}: every run one after the other, then the untrained models evaluated."""
    tokenizer = parts.demo_tokenizer()
    root = tmp_path_factory.mktemp("models")
    folders = {name: parts.write_model(root / f"model-{index}", name, tokenizer)
               for index, name in enumerate(ARCHITECTURES)}
    runs = {}
    for layout in LAYOUTS:
        for index, name in enumerate(ARCHITECTURES):
            output = root / f"run-{index}-{layout}"
            runs[name, layout] = (*parts.command(folders[name], output, layout), output)
    finished = parts.run_each(runs)
    untrained = {name: parts.untrained_metrics(folder) for name, folder in folders.items()}
    rows = {key: parts.judge(*key, *finished[key], runs[key][2], untrained[key[0]]) for key in runs}
    parts.compare_layouts(rows)
    parts.write_results(list(rows.values()))
    return rows


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
@pytest.mark.compares("bf16", "each architecture's eval loss at the bf16 default: fsdp on 2 SPMD devices against the "
                      "data layout on one")
def test_architecture_trains_in_two_graphs_without_host_reads_and_learns(matrix, architecture, layout):
    row = matrix[architecture, layout]
    assert not row.problems, row.as_dict()
