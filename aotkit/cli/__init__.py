"""The command line: `aotkit lower | compile | run | check | opt | inspect | backends`.

Not a stage of its own: every command is a thin shell over the staged API (`lower`,
`Lowered.compile`, the pass pipeline, the backends registry), so what the CLI prints for a
function is exactly what the Python API returns for it.

What it promises: `main(argv=None) -> int` returns 0 on success; 1 on a user error, with one
line on stderr (when the user's own code raised, their traceback trimmed to their frames
comes first); 2 on a usage error (argparse). Bad input never aborts the process and never
prints aotkit's own traceback unless `--traceback` asks for it. `aotkit --help` and argument
errors are answered without importing the tracer, the passes or a backend.

Where things are:
- `parser`: `build_parser`, the subcommands' flags and the argument types (`_add_target_args`
  holds the flags every function-taking command shares);
- `commands`: the `cmd_*` handlers and what they print;
- `targets`: FILE.py:FN (`_lower_python`, the one call into the front ends), module files
  (`load_module_file`, the one place they are read) and artifacts as stages, `--transform`;
- `inputs`: `--inputs` .npy/.npz files and random inputs;
- `output`: stdout and files written atomically (`-o`);
- `worker`: `run --timeout`'s worker process;
- `report`: errors, progress and `-v` notes on stderr, the exit codes;
- `notation`: the text forms of specs, pytrees, leaf names and times.
"""

from __future__ import annotations

import contextlib
import os
import sys

from aotkit.cli.parser import build_parser, targets_first
from aotkit.cli.report import EXIT_USAGE, EXIT_USER, report_error


def main(argv: list[str] | None = None) -> int:
    """Runs one `aotkit` command; returns the exit code (0 ok, 1 user error, 2 usage)."""
    parser = build_parser()
    argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        args = parser.parse_args(targets_first(argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    # `run --timeout` starts a worker process with the same command line.
    args.argv = argv
    try:
        return args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write(f"aotkit {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader (`| head`) left; Python would otherwise complain again at exit.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_USER
    except Exception as e:
        return report_error(args.command, e, args.traceback)
