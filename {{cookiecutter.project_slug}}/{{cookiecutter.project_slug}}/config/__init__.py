"""What a user changes per run: `TrainConfig` (every option, also train.py's command line) and the baked defaults.

The template's questions only chose these defaults; `from {{ cookiecutter.project_slug }}.config import TrainConfig`
is the one import a notebook or script needs. Its options grouped by concern (`config.data`, `config.model`, ...)
are groups.py's: each part of the package is handed the group it reads. The defaults and choices (defaults.py) are
importable from here too.
"""

from .defaults import *  # noqa: F403  (every default and choice, under the folder's name)
from .errors import UserError  # noqa: F401  (the base class of every one-line problem)
from .train_config import TrainConfig  # noqa: F401
