"""The ``minipar`` console script.

Each subcommand lives beside the code it drives and registers itself through an
``add_parser(subparsers)`` function listed in ``_COMMAND_MODULES``. Bad input exits with status 2
and one line naming the rule and the value (:class:`minipar.errors.InputError`), never a
traceback; Ctrl-C exits with status 130 and one line. This is the top layer: it imports the
library, never the other way round.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from minipar.errors import InputError

_COMMAND_MODULES = [
    "minipar.cost.cli",  # params, flops, memory, activations, bubble, collective, plan
    "minipar.bench.cli",  # bench collectives, bench dp, ...
    "minipar.bench.gpu",  # calibrate gpu
    "minipar.grading.cli",  # grade
]
# commands whose third-party imports come from an extra (pyproject.toml), not the base install
_EXTRAS = {"minipar.grading.cli": ("grade", "grade")}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minipar", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in _COMMAND_MODULES:  # a missing module is an error, never a silently absent command
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if name not in _EXTRAS or (e.name or "").startswith("minipar"):
                raise
            _needs_extra(sub, *_EXTRAS[name], e.name)
            continue
        module.add_parser(sub)
    return parser


def _needs_extra(sub, command: str, extra: str, missing: str) -> None:
    """``command`` without its extra installed: it exits 2 saying what to install (so `minipar
    bench` and `minipar plan` work on a GPU node that installed the base package only)."""

    def run(args):
        raise InputError(
            f"needs the [{extra}] extra ({missing} is not installed): pip install -e '.[{extra}]'"
        )

    p = sub.add_parser(command, help=f"(needs the [{extra}] extra)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as e:
        print(f"minipar {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (ranks are stopped on the way)
        print(f"minipar {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # python -m minipar.cli
    raise SystemExit(main())
