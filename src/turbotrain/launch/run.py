"""`turbotrain run [turbotrain options] [--] script.py [script arguments]` (and `python -m turbotrain ...`):
run an unmodified Trainer script with turbotrain's classes in place of Transformers' and TRL's.

The script runs as `python script.py args` would run it: as a fresh `__main__` module whose `__file__`
is the script's absolute path, with `sys.argv == ["script.py", *args]` (the path as typed) and the
script's folder first on `sys.path` (its sibling modules import), in this process, so `torchrun -m turbotrain` and `accelerate launch -m turbotrain` launch it as
they launch any script. Before it starts, `patch.install` swaps the class names (patch.py) and the
options are checked (options.py). What the user sees, on the first process only: each Trainer's one
summary line when training begins (training/run_summary.py), and a last line naming what the script made:

    turbotrain run: train.py made 1 Trainer: TurboTrainer (backend eager; passes: label_sparsity, ...)
    turbotrain run: train.py made no Trainer: nothing was accelerated

The exit code is the script's: 0, its `SystemExit` code (re-raised as is), or 1 after the traceback of
an exception it raised (printed by `sys.excepthook` from the script's first frame on); a script that is
not there is exit code 2 with Python's message.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import sys
import types

PROG = "turbotrain run"
USAGE = f"usage: {PROG} [turbotrain options] [--] script.py [script arguments]"
NOT_FOUND_EXIT = 2  # Python's own exit code for a script it cannot open
INTERRUPTED_EXIT = 130


def usage() -> str:
    """The help: the options from option_table.py (TurboOptions' fields written out as data, options.py), so
    `turbotrain run --help` imports neither torch nor Transformers."""
    from turbotrain.launch.option_table import OPTIONS

    lines = [USAGE, "", __doc__.split("\n\n")[0], "", "turbotrain options (defaults of the script's arguments):"]
    for name, default, help_text in OPTIONS:
        lines.append(f"  --{name} (default {default}): {help_text}")
    lines.append("  ... or the same as JSON in the TURBOTRAIN_OPTIONS environment variable.")
    lines.append("Where the script parses TrainingArguments with HfArgumentParser, its own --backend etc. work too.")
    return "\n".join(lines)


def is_first_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def made_line(script: str, made: list) -> str:
    """The last line: which turbotrain Trainers the script made (`made`: their `summary.TrainerRecord`s),
    and what the last train() of each ran."""
    name = os.path.basename(script)
    if not made:
        return f"{PROG}: {name} made no Trainer: nothing was accelerated"
    count = f"{len(made)} Trainer" + ("s" if len(made) > 1 else "")
    described = []
    for record in made:
        ran = record.summary.removeprefix("turbotrain: ") if record.summary else "never trained"
        described.append(f"{record.name} ({ran})")
    return f"{PROG}: {name} made {count}: " + "; ".join(dict.fromkeys(described))


def _script_traceback(error: BaseException, script: str):
    """The traceback from the script's first frame on (this module's frames left out)."""
    tb, path = error.__traceback__, os.path.abspath(script)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    return tb


def exec_as_main(script: str) -> None:
    """Run the file `script` as `__main__`, the way `python script.py` does: `__file__` is the absolute
    path (`runpy.run_path` would give the path as typed, and put it in `sys.argv[0]` too)."""
    path = os.path.abspath(script)
    with io.open_code(path) as file:
        code = compile(file.read(), path, "exec")
    main = types.ModuleType("__main__")
    loader = importlib.machinery.SourceFileLoader("__main__", path)
    main.__dict__.update(__file__=path, __cached__=None, __loader__=loader, __spec__=None, __builtins__=builtins)
    before = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = before


def run_script(script: str, args: list[str], options: dict) -> int:
    """Run `script` as `__main__` with `args` and turbotrain's classes; the script's exit code."""
    if not os.path.isfile(script):
        print(
            f"{PROG}: can't open file {os.path.abspath(script)!r}: [Errno 2] No such file or directory", file=sys.stderr
        )
        return NOT_FOUND_EXIT
    from turbotrain.launch.patch import install
    from turbotrain.training.run_summary import MADE
    from turbotrain.utils.warnings import quiet_cpu_pin_memory

    quiet_cpu_pin_memory()
    patch, first = install(options), len(MADE)
    saved_argv, saved_path = sys.argv, sys.path[:]
    sys.argv = [script, *args]
    sys.path[0:1] = [os.path.dirname(os.path.abspath(script))]  # as `python script.py` sets it
    code = 0
    try:
        exec_as_main(script)  # a SystemExit goes up as it is: Python exits with the script's code
        release_process_group()
    except (Exception, KeyboardInterrupt) as error:
        error = error.with_traceback(_script_traceback(error, script))  # what Python would print for the script
        sys.excepthook(type(error), error, error.__traceback__)
        code = INTERRUPTED_EXIT if isinstance(error, KeyboardInterrupt) else 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if is_first_process():
            print(made_line(script, MADE[first:]), file=sys.stderr, flush=True)
        patch.undo()
    return code


def release_process_group() -> None:
    """After a script that finished normally: destroy the process group its Trainer set up (torchrun,
    accelerate launch) and left, as torch asks scripts to before they exit; left to interpreter teardown,
    its communication threads could be destroyed still running and a finished rank abort ("terminate called
    without an active exception"). The ranks meet at a barrier first: a rank that shut its connections
    down while a peer was still finishing its last collective made both abort at exit (seen once in CI,
    under load). Not after an error (peers may still wait in a collective: the rank exits and the launcher
    sees its code); a failure to destroy is reported, never the script's result."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception as error:  # the script succeeded; its exit code stays 0
        print(f"{PROG}: the process group could not be destroyed at exit: {error}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else NOT_FOUND_EXIT
    from turbotrain.launch.run_options import OptionError, run_options

    try:
        options, command = run_options(argv)
    except OptionError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return NOT_FOUND_EXIT
    if not command:
        print(f"{USAGE}\n{PROG}: error: no script given", file=sys.stderr)
        return NOT_FOUND_EXIT
    return run_script(command[0], command[1:], options)
