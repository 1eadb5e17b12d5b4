"""Command line: ``swapprune [COMMAND] ...``, a thin layer over :func:`swapprune.pipeline.sequence.run`.

``swapprune --budget 8 --protocol interchange`` (no command) runs the main
job, ``swapprune prune``. Each command lives in its own module with
``add_arguments(parser)`` and ``run(args) -> int``: it builds a
:class:`~swapprune.config.RunConfig` from flags generated out of the
configuration's field metadata, calls the library and prints a summary that
ends with the natural next command. Every user error prints one line and
exits with status 2; nothing here imports torch until a command runs. Each command's
``run`` imports the stages it calls (numpy, and torch behind them): building the parser,
which imports every command's module, imports neither.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable

from swapprune import __version__
from swapprune.cli.argv import command_line
from swapprune.cli.options import Formatter, Parser, apply_quick, check_required
from swapprune.engine import threads
from swapprune.errors import SwappruneError, Terminated, did_you_mean
from swapprune.output.writers import WriteFailed

#: command -> (module, one-line help). ``prune`` is the default command.
COMMANDS = {
    "prune": ("prune", "score, select, remove/merge and save a checkpoint (default command)"),
    "score": ("score", "measure the swap-KL probes and write scores.json"),
    "apply": ("apply", "re-apply a plan.json to a model and save the checkpoint"),
    "eval": ("evaluate", "evaluate a model with lm-eval on the offline task pack"),
    "compare": ("compare", "pruning cost of each criterion at each budget, with paired verdicts"),
    "validate": ("validate", "does each criterion predict the real cost of deleting a block?"),
    "landscape": ("landscape", "every removal set of a small budget; where each cut ranks"),
    "run": ("recipe", "run a YAML recipe: score -> prune -> heal -> quantize -> eval -> export"),
    "list": ("listing", "list criteria, strategies, merge rules, probes, runtimes and tasks"),
}

EPILOG = """examples:
  swapprune --budget 8 --protocol interchange             # the main job on the demo model
  swapprune --budget 8 --protocol interchange --quick     # a first look: 1.5 min alone on 2 cores, 3-4.5 beside other jobs
  swapprune score --model smollm2-135m --output scores.json
  swapprune --scores scores.json --budget 4 --protocol replacement --output r4/
  swapprune compare --budgets 1,3,5 --criteria interchange,replacement,bi --output cmp/
  swapprune eval --model r4/ --tasks wikitext2_ppl,piqa --output r4/eval.json
  swapprune run recipes/prune_heal_quantize.yaml --set prune.budget=4
Block indices are 0-based everywhere. 'swapprune COMMAND --help' lists a command's options."""


def _module(command: str):
    return importlib.import_module(f"swapprune.cli.{COMMANDS[command][0]}")


def build_parser() -> Parser:
    """The full parser, with one sub-parser per command."""
    parser = Parser(
        prog="swapprune",
        description="Protocol-aware depth pruning of transformer "
        "language models with swap-KL probes.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"swapprune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (_, text) in COMMANDS.items():
        mod = _module(name)
        p = sub.add_parser(
            name,
            help=text,
            description=text,
            epilog=getattr(mod, "EPILOG", None),
            formatter_class=Formatter,
        )
        mod.add_arguments(p)
        parser.commands[name] = p
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``swapprune`` script; returns the exit status.

    A reader that stops early (``swapprune run --schema | head -5``) closes the pipe: the
    command stops there, as a tool killed by SIGPIPE would, with status 141 and no
    traceback; whatever the command was writing is cleaned up as for Ctrl-C.
    """
    try:
        status = _main(argv)
        sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at exit
        return status
    except BrokenPipeError:
        _silence_stdout()
        return 128 + 13  # SIGPIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no file (a test's capture)
        pass


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        hint = did_you_mean(argv[0], COMMANDS) or f"; commands: {', '.join(COMMANDS)}"
        print(f"swapprune: error: unknown command '{argv[0]}'{hint}", file=sys.stderr)
        return 2
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv.insert(0, "prune")
    parser = build_parser()
    if argv and argv[0] in COMMANDS:
        apply_quick(parser.commands[argv[0]], argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a one-line usage error
        return e.code if isinstance(e.code, int) else 2
    if args.command is None:
        parser.print_help()
        return 2
    missing = check_required(args)
    if missing:
        print(
            f"swapprune {args.command}: error: {missing} is required; see "
            f"'swapprune {args.command} --help'",
            file=sys.stderr,
        )
        return 2
    if args.command != "list":
        threads.apply()  # before the command imports torch: one place, one decision
    previous = _terminate_cleanly()
    try:
        return _module(args.command).run(args) or 0
    except WriteFailed as e:  # a write the system refused: what the run kept, too
        print(f"swapprune: error: {e}; {kept_on_interrupt(args)}", file=sys.stderr)
        return 2
    except SwappruneError as e:
        print(f"swapprune: error: {error_line(e)}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"swapprune: terminated (SIGTERM); {kept_on_interrupt(args)}", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"swapprune: interrupted; {kept_on_interrupt(args)}", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def kept_on_interrupt(args) -> str:
    """What a stopped command leaves, and where: the command's own ``kept_on_interrupt(args)``
    (the finished work it keeps, if any), else only that partial files were removed."""
    kept = getattr(_module(args.command), "kept_on_interrupt", None)
    where = kept(args) if kept is not None else None
    return where or "partial files removed; nothing was written"


def error_line(e: SwappruneError) -> str:
    """The error's one line, with the run that fixes it (if any) written as its command."""
    if e.fix is None:
        return str(e)
    return e.line(command_line(e.fix.config, e.fix.command))


def _terminate_cleanly():
    """Turn SIGTERM into an exception, so every cleanup runs (what timeout, systemd, Slurm and
    Kubernetes send); returns the previous handler (``None`` off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated(signum)

    return signal.signal(signal.SIGTERM, handler)


def say_to_stderr(args) -> Callable[[str], None]:
    """Stage lines on stderr; with ``--no-progress`` only what the run will cost (the
    ``[estimate]`` lines), which a user needs before the wait whatever else is hidden."""
    if getattr(args, "no_progress", False):
        return lambda line: (
            print(line, file=sys.stderr, flush=True) if line.startswith("[estimate]") else None
        )
    return lambda line: print(line, file=sys.stderr, flush=True)
