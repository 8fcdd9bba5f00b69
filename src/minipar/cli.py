"""The ``minipar`` console script.

Each subcommand lives beside the code it drives and registers itself through an
``add_parser(subparsers)`` function listed in ``_COMMAND_MODULES``. Bad input exits with status 2
and one line naming the rule and the value (``CliError``), never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

_COMMAND_MODULES = [
    "minipar.cost.cli",       # params, flops, memory, activations, bubble, collective, plan
    "minipar.bench.cli",      # bench collectives, bench dp, ...
    "minipar.grading.cli",    # grade
]


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minipar", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue  # a chapter not written yet
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        print(f"minipar {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # python -m minipar.cli: use the imported module's CliError
    from minipar.cli import main as _main

    raise SystemExit(_main())
