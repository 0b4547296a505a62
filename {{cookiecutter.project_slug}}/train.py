"""Train from the command line: `python train.py` or `accelerate launch train.py`.

Every option and its default: `python train.py --help`. The training itself
lives in {{ cookiecutter.project_slug }}/loop/training.py, shared with the notebook.
"""

import sys

from {{ cookiecutter.project_slug }}.cli import main

if __name__ == "__main__":
    sys.exit(main())
