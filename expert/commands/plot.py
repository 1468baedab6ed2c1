"""`dam plot roofline|iron-law`: the roofline chart or the iron-law breakdown as an image (SVG, PNG, PDF)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  dam plot roofline --example large_gemm --output roofline.svg
  dam plot iron-law report.json --output iron-law.png
  dam plot roofline run.yaml --set arithmetic_intensity=120 --output roofline.svg

SOURCE is a saved report (JSON) or an observation file. SVG is drawn without any plotting library;
PNG and PDF need matplotlib: pip install 'dam-expert[plot]'. --backend matplotlib draws SVG with it too.
"""
_SUFFIXES = (".svg", ".png", ".pdf")


def register(sub: Any) -> None:
    p = sub.add_parser("plot", help="roofline or iron-law chart as SVG/PNG",
                       description="Draw the roofline (hardware roof, ridge point, workload point) or the iron-law "
                                   "breakdown of a diagnosis.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("chart", choices=["roofline", "iron-law"])
    p.add_argument("source", nargs="?", metavar="SOURCE", help="saved report (JSON) or observation file")
    p.add_argument("--example", metavar="NAME", help="a bundled example (see `dam examples`)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an observation (repeatable; re-diagnoses a saved report with it)")
    p.add_argument("--output", required=True, metavar="FILE", help="image file: .svg, .png or .pdf")
    p.add_argument("--backend", choices=["builtin", "matplotlib"], default="builtin",
                   help="SVG writer (PNG/PDF always use matplotlib)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import ObservationError, Problem
    from ..report.render.charts import draw, no_chart
    from ..report.render.svg import iron_law_svg, roofline_svg
    from ._common import parse_sets
    from .explain import load_report

    output = Path(args.output)
    suffix = output.suffix.lower()
    if suffix not in _SUFFIXES:
        raise ObservationError([Problem(f"--output {args.output}", f"unknown image type {suffix or '(none)'!r}",
                                        f"use one of {', '.join(_SUFFIXES)}")], title="invalid --output")
    if not args.source and not args.example and not args.set:
        raise ObservationError([Problem("SOURCE", "nothing to plot",
                                        "give a report, an observation file, --example NAME or --set NAME=VALUE")])
    if args.source or args.example:
        report = load_report(args.source, args.example)
        if args.set:
            report = report.what_if(parse_sets(args.set)).after
    else:
        import expert

        report = expert.default_expert().diagnose(parse_sets(args.set))
    if suffix == ".svg" and args.backend == "builtin":
        svg = roofline_svg(report) if args.chart == "roofline" else iron_law_svg(report)
        if svg is None:
            raise no_chart(args.chart)
        from ..errors import write_output

        write_output(args.output, svg + "\n")
    else:
        draw(report, args.chart, output)
    print(f"wrote {output}")
    return 0
