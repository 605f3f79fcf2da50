"""Command line of skseq: ``python -m skseq COMMAND``.

Commands:

``demo [hmm|lgssm|neural|all]``
    Fit every estimator family (or one) to the real data sets bundled with
    skseq and report what each model found; ``--plot FILE`` saves a figure.
``datasets``
    List the bundled data sets, their size, source and licence.
"""

import argparse
import re
import sys


def _descr_paragraph(descr, label):
    """The paragraph of a data set's DESCR that starts with ``label`` (e.g. "Source:"),
    after the label, on one line and without reST's emphasis and literal marks."""
    paragraph = descr.split(f"\n{label}", 1)[1].split("\n\n")[0]
    return re.sub(r"\*|``", "", paragraph.replace("\n", " ")).strip()


def _list_datasets():
    from . import datasets

    for name in datasets.__all__:
        bunch = getattr(datasets, name)()
        title = bunch.DESCR.splitlines()[0]
        # The descriptions end a sentence with two spaces: the first sentence of
        # the source names it (later ones say how the file was copied).
        source = _descr_paragraph(bunch.DESCR, "Source:").split(".  ")[0].rstrip(".") + "."
        licence = _descr_paragraph(bunch.DESCR, "Licence:").split(";")[0]
        print(f"{name}: {title}; {bunch.data.shape[0]} rows x {bunch.data.shape[1]} series")
        print(f"    source: {' '.join(source.split())}")
        print(f"    licence: {' '.join(licence.split())}")
    print("\nEach loader's DESCR gives the full source and licence (e.g. load_nile().DESCR).")


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m skseq",
        description="skseq: scikit-learn estimators for sequence models.",
        epilog="Run 'python -m skseq COMMAND --help' for a command's options.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="fit every estimator family to the bundled real data and report",
        description=(
            "Fit the estimators of one family, or all, to the real data sets bundled with "
            "skseq, printing progress and what each model found. hmm: the five HMMs "
            "(business cycles, sunspots, earthquakes, the Nile's change point); lgssm: "
            "Kalman smoothing and forecasting of the Nile, a factor model of Danish money "
            "demand; neural: sunspot forecasts by the four networks."
        ),
    )
    demo.add_argument(
        "family",
        nargs="?",
        default="all",
        choices=["hmm", "lgssm", "neural", "all"],
        help="which family to run (default: all)",
    )
    demo.add_argument(
        "--plot",
        metavar="FILE",
        help="save a figure (one panel per family) to FILE, e.g. demo.png (needs matplotlib)",
    )
    demo.add_argument(
        "--epochs",
        type=int,
        default=60,
        metavar="N",
        help="training epochs of each network in the neural demo (default: 60)",
    )
    commands.add_parser(
        "datasets", help="list the bundled data sets with their size, source and licence"
    )
    return parser


def main(argv=None):
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "demo":
        from ._demo import check_plot_file, pyplot, run_demo

        if arguments.plot is not None:
            try:
                pyplot()
                check_plot_file(arguments.plot)
            except (ImportError, ValueError) as error:  # before any work, not after a minute of it
                print(f"python -m skseq demo: {error}", file=sys.stderr)
                return 2
        if arguments.epochs < 1:
            parser.error(f"demo --epochs must be at least 1, got {arguments.epochs}")
        run_demo(arguments.family, plot=arguments.plot, epochs=arguments.epochs)
    elif arguments.command == "datasets":
        _list_datasets()
    return 0


if __name__ == "__main__":
    sys.exit(main())
