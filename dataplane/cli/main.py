"""`railab` entry point. One module per verb under dataplane/cli/, as in containerlab.

Each verb module exposes `register(subparsers)`, which adds its parser and sets
`func` (called with the parsed args, returns the exit status).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from dataplane.errors import RailabError

VERB_MODULES = ("topo", "plan", "deploy", "attach", "destroy", "inspect", "exec_", "probe", "counters", "bench", "lb", "tm", "top", "run", "fault", "ui", "nav")


class _OneLineParser(argparse.ArgumentParser):
    """Option errors as one line naming the command, like every other railab error
    (`railab VERB --help` shows the usage)."""

    def error(self, message: str):
        sys.stderr.write(f"railab: error: {self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="railab",
        description="Virtual AI-cluster fabrics on network namespaces with XDP switches.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for name in VERB_MODULES:
        importlib.import_module(f"dataplane.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except RailabError as err:
        print(f"railab: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("railab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`railab lb show --json | head`): not an error of ours;
        # point stdout at /dev/null so the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
