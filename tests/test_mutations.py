"""The named mutations of `make mutation` (tools/mutations.py) still match the code they mutate: each original is in
its module exactly once, so that an edit of the module cannot leave the list mutating nothing."""

import pytest

from tools.mutations import MUTATIONS, SLUG


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda mutation: f"{mutation.module}:{mutation.what}")
def test_each_mutation_s_original_is_in_its_module_once(default_project, mutation):
    text = (default_project / SLUG / mutation.module).read_text()
    assert text.count(mutation.old) == 1, (mutation.module, mutation.old)
    assert mutation.new != mutation.old
