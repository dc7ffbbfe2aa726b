"""`python -m turbotrain ...`: the `turbotrain` command, and a script in place of a command runs it.

    python -m turbotrain script.py args               # = turbotrain run script.py args
    python -m turbotrain --backend eager script.py    # = turbotrain run --backend eager script.py
    python -m turbotrain pretrain ...                 # = turbotrain pretrain ...

so `torchrun --nproc_per_node=2 -m turbotrain script.py args` and `accelerate launch -m turbotrain
script.py args` launch an unmodified script with turbotrain in every process.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from turbotrain import cli

    if argv and (argv[0] in cli.COMMANDS or argv[0] in ("run", "-h", "--help")):
        return cli.main(argv)
    from turbotrain.launch import main as run_main

    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
