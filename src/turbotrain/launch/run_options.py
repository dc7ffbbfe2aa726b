"""turbotrain's options for a zero-edit run: from `turbotrain run --backend eager ... script.py` flags and
the `TURBOTRAIN_OPTIONS` environment variable (JSON), checked once, before the script starts.

The options and their types are `TurboOptions`' fields (args.py); nothing is listed again here. The flags
are spelt like HfArgumentParser's (`--padding_free False`, `--padding-free False`, `--backend=inductor`,
`--backend_options '{"scope": "blocks"}'`). Flags win over the environment variable. The result is a
dict of the options given (unset ones are absent): they become the defaults of the arguments classes the
script builds (`patch.py`), so a value the script passes itself, or that its own command line sets
through HfArgumentParser, still wins.

`turbotrain run --help` lists the options from option_table.py, written by `python -m turbotrain.launch.run_options`
from `option_rows()` (the help without the source paths); a test checks it against TurboOptions.
"""

from __future__ import annotations

import difflib
import json
import os
import pprint
import typing
from dataclasses import fields
from pathlib import Path

from turbotrain.args import TurboOptions, json_object
from turbotrain.utils.help_text import without_source_paths

ENV_VARIABLE = "TURBOTRAIN_OPTIONS"
TRUE, FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


class OptionError(ValueError):
    """A turbotrain option that does not exist or has a value of the wrong kind."""


def option_names() -> list[str]:
    return [f.name for f in fields(TurboOptions)]


def check_name(name: str) -> str:
    """`name` if it is a turbotrain option, else an OptionError that lists the valid ones."""
    names = option_names()
    if name in names:
        return name
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise OptionError(f"unknown turbotrain option {name!r}{hint}; valid options: {', '.join(names)}")


def _parse_value(name: str, text: str):
    """A flag's text as the option's type (bool, int, str, dict; 'None' for an optional one)."""
    kind = typing.get_type_hints(TurboOptions)[name]
    allowed = typing.get_args(kind) or (kind,)
    if type(None) in allowed and text == "None":
        return None
    if bool in allowed:
        if text.lower() in TRUE + FALSE:
            return text.lower() in TRUE
        raise OptionError(f"--{name} takes True or False, got {text!r}")
    if int in allowed:
        try:
            return int(text)
        except ValueError:
            raise OptionError(f"--{name} takes a whole number, got {text!r}") from None
    if dict in allowed:
        try:
            return json_object(f"--{name}", text)
        except ValueError as error:
            raise OptionError(str(error)) from None
    return text


def from_environment(environ=os.environ) -> dict:
    text = environ.get(ENV_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as error:
        raise OptionError(f"{ENV_VARIABLE} is not JSON ({error}): {text!r}") from None
    if not isinstance(options, dict):
        raise OptionError(f"{ENV_VARIABLE} must be a JSON object of turbotrain options, got {text!r}")
    return {check_name(name): value for name, value in options.items()}


def split_command_line(argv: list[str]) -> tuple[dict, list[str]]:
    """`[--option value ...] [--] script.py args...` -> (the options given, [script.py, args...])."""
    options, i = {}, 0
    while i < len(argv) and argv[i].startswith("--"):
        flag = argv[i]
        if flag == "--":
            return options, argv[i + 1 :]
        name, has_value, value = flag[2:].partition("=")
        name = check_name(name.replace("-", "_"))
        if not has_value:
            if i + 1 >= len(argv):
                raise OptionError(f"{flag} needs a value")
            i, value = i + 1, argv[i + 1]
        options[name] = _parse_value(name, value)
        i += 1
    return options, argv[i:]


def checked(options: dict) -> dict:
    """`options` after TurboOptions' own checks (values, types, the backend's options); unchanged."""
    try:
        TurboOptions(**options).validate()
    except (TypeError, ValueError) as error:
        raise OptionError(str(error)) from None
    return options


def run_options(argv: list[str], environ=os.environ) -> tuple[dict, list[str]]:
    """The run's options (environment, then flags on top) and the script's command line."""
    flags, rest = split_command_line(argv)
    return checked({**from_environment(environ), **flags}), rest


def option_rows() -> list[tuple[str, str, str]]:
    """(name, default as Python writes it, help) of every option, in TurboOptions' order: what option_table.py holds."""
    return [(f.name, repr(f.default), without_source_paths(f.metadata["help"])) for f in fields(TurboOptions)]


def write_table(path: Path | None = None) -> None:
    path = path or Path(__file__).with_name("option_table.py")
    head = (
        '"""Generated by `python -m turbotrain.launch.run_options` from TurboOptions: `turbotrain run --help` reads it, '
        'importing\nneither torch nor Transformers (run.py). tests/test_cli_help.py checks it against TurboOptions."""'
    )
    path.write_text(f"{head}\n\nOPTIONS = {pprint.pformat(option_rows(), width=116)}\n")


if __name__ == "__main__":
    write_table()
