"""Label a file with the trained model: `python predict.py --model outputs/model --input FILE --output PATH`.

Every option: `python predict.py --help`. The loop lives in {{ cookiecutter.project_slug }}/loop/prediction.py.
"""

import sys

from {{ cookiecutter.project_slug }}.predict_cli import main

if __name__ == "__main__":
    sys.exit(main())
