{# tojson: the project name is data, so quotes, backslashes and non-ASCII text stay one valid string. -#}
{{ (cookiecutter.project_name ~ ": fine-tune a " ~ ("causal language model" if cookiecutter.task == "causal-lm" else "sequence classifier") ~ " on TPUs with Accelerate and PyTorch/XLA.") | tojson }}
