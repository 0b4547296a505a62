"""A Jinja extension for this template (named in cookiecutter.json's `_extensions`): `tojson` writes real characters.

Jinja's `tojson` escapes every non-ASCII character by default. A character beyond the Basic
Multilingual Plane (an emoji) then becomes a pair of surrogate escapes such as "\\ud83d\\ude80":
valid JSON, but in Python source two lone surrogates (not the emoji), and in TOML an error. With
`ensure_ascii=False` the answer is written as typed, and stays valid in every generated file.
Not a hook: cookiecutter runs only the files of this folder named after a hook.
"""

from jinja2.ext import Extension


class UnicodeJson(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        environment.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
