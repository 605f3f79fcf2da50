"""Command line: ``python -m skseq demo``."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m skseq", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="fit the HMMs on the bundled real data sets and report")
    arguments = parser.parse_args(argv)
    if arguments.command == "demo":
        from ._demo import run_demo

        run_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
