"""`python -m aotkit.native build [--cache DIR] [--force]`: builds aotkit-run, prints its path;
`python -m aotkit.native flags`: the compile flags for a program using aotkit_runtime.h;
`python -m aotkit.native portable FILE.aotx [--version V]`: adds an older copy of its portable
module (aotkit/native/portable.py) for plugins with an older StableHLO."""

from __future__ import annotations

import argparse
import sys

from aotkit import native
from aotkit.errors import ArtifactError
from aotkit.native import portable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aotkit.native")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="compile aotkit-run; print its path")
    build.add_argument("--cache", help="the folder builds go to (default: ~/.cache/aotkit-native)")
    build.add_argument("--force", action="store_true", help="compile even if built already")
    commands.add_parser("flags", help="print the C flags for aotkit_runtime.c and its users")
    copy = commands.add_parser("portable", help="add an older copy of an artifact's module")
    copy.add_argument("file", help="the artifact (rewritten in place)")
    copy.add_argument("--version", default="minimum", help="StableHLO version (default: minimum)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(native.build(args.cache, force=args.force))
        elif args.command == "portable":
            version = portable.add_portable_copy(args.file, args.version)
            print(f"{args.file}: added section '{portable.PREFIX}{version}'")
        else:
            print(" ".join([*native.compile_flags(), str(native.RUNTIME), *native.LIBS]))
    except (RuntimeError, ValueError, OSError, ArtifactError) as e:
        print(f"python -m aotkit.native: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
