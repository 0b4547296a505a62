"""{{ cookiecutter.project_name }}: train a sequence classifier on TPUs with Accelerate and PyTorch/XLA."""
