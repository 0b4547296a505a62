"""Plan before you pay: `python plan.py --tpu v5e-1,v5e-8,v6e-8 [train.py's flags]` says what the run needs per chip
on each TPU, whether it fits, the largest batch that does, and the run's hours and cost; `--compile` adds the TPU
compiler's own answer, compiled here without a TPU (docs/plan.md).

Every option: `python plan.py --help`. The estimate lives in {{ cookiecutter.project_slug }}/planning/, the compile
in {{ cookiecutter.project_slug }}/xla/tpu_compile.py.
"""

import sys

from {{ cookiecutter.project_slug }}.plan_cli import main

if __name__ == "__main__":
    sys.exit(main())
