"""The architecture matrix: your own model, at your chip count.

Tiny random-weight models of the architectures people bring (built from transformers' config classes, written with
save_pretrained next to the project's demo tokenizer: no hub) train through train.py on the shipped demo files in
this project's layout: data (one device), or fsdp (two SPMD devices) and data, to compare them. Each must compile its
3 graphs and no more, read the device only at the epoch's end, learn (its eval loss below the untrained model's on the
host, in float32), learn the same in both layouts (fsdp projects), and export a folder that from_pretrained loads. The
rows of this project's layout are written for the README's Models table when MODEL_MATRIX_RESULTS names a folder.
"""

import model_matrix as parts
import pytest
from model_matrix import ARCHITECTURES, LAYOUTS

pytestmark = [pytest.mark.xla, pytest.mark.slow]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    """{(architecture, layout): Row}: every run started two at a time, the untrained models evaluated meanwhile."""
    tokenizer = parts.demo_tokenizer()
    root = tmp_path_factory.mktemp("models")
    folders = {name: parts.write_model(root / f"model-{index}", name, tokenizer)
               for index, name in enumerate(ARCHITECTURES)}
    runs = {}
    for layout in LAYOUTS:
        for index, name in enumerate(ARCHITECTURES):
            output = root / f"run-{index}-{layout}"
            runs[name, layout] = (*parts.command(folders[name], output, layout), output)
    # The untrained metrics are computed in this process while the first two runs start.
    finished, untrained = parts.run_at_once(
        runs, at_once=2, meanwhile=lambda: {name: parts.untrained_metrics(folder) for name, folder in folders.items()}
    )
    rows = {key: parts.judge(*key, *finished[key], runs[key][2], untrained[key[0]]) for key in runs}
    parts.compare_layouts(rows)
    parts.write_results(list(rows.values()))
    return rows


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_architecture_trains_in_three_graphs_without_host_reads_and_learns(matrix, architecture, layout):
    row = matrix[architecture, layout]
    assert not row.problems, row.as_dict()
