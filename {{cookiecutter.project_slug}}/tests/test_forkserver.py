"""The fork server (tests/forkserver.py) forks a run only where a fresh process would import as it did."""

import os
import sys

from forkserver import ForkServer

# A module whose import sets a variable, as torch_xla's, jax's and libtpu's imports do (TPU_LIBRARY_PATH and others).
LEAKY = 'import os\nos.environ.setdefault("LEAKY_IMPORT", "set by the import")\n'


def test_a_variable_an_import_left_in_the_tests_environment_still_forks(tmp_path):
    """An import in the test's own process puts the variable in every later run's environment (the plan tests import
    jax and libtpu): a run that holds the value the import sets is forked, one that sets another is not.

    Before, a run after the plan's tests in the same pytest process was a plain subprocess (9-11 s of imports
    each): everything after test_plan.py in the default bake's suite."""
    (tmp_path / "leaky.py").write_text(LEAKY)
    env = {key: value for key, value in os.environ.items() if key != "LEAKY_IMPORT"}
    server = ForkServer(tmp_path, env, ("leaky",))
    try:
        assert server.import_changes == {"LEAKY_IMPORT"}
        assert server.routable(env, ())
        assert server.routable({**env, "LEAKY_IMPORT": "set by the import"}, ())
        assert not server.routable({**env, "LEAKY_IMPORT": "another value"}, ())
        code = "import os, sys; sys.exit(0 if os.environ['LEAKY_IMPORT'] == 'set by the import' else 3)"
        returncode, _, stderr = server.run([sys.executable, "-c", code], "-c", code, [],
                                           {**env, "LEAKY_IMPORT": "set by the import"}, 60)
        assert returncode == 0, stderr
    finally:
        server.close()
