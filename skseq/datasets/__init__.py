"""Small real data sets bundled with skseq (all public domain; see data/README.md)."""

from ._loaders import load_nile, load_sunspots, load_us_macro

__all__ = ["load_us_macro", "load_nile", "load_sunspots"]
