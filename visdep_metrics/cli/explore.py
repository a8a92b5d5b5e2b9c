"""`visdep explore OUT`: print the path of an audit's explorer page and open it in a browser."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmms_eval_tasks.errors import VisdepError


class ExplorerMissingError(VisdepError):
    """The folder holds no explorer page."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explore", help="open an audit's explorer page (OUT/explorer.html) in a browser",
                       description="Print the path of OUT/explorer.html, the page `visdep audit` writes (one file, "
                                   "no server, no network: the diagnostic space, the threshold τ, every question, "
                                   "the frames), and open it with the system's browser.")
    p.add_argument("out", type=Path, metavar="OUT", help="a `visdep audit` output folder (or the page itself)")
    p.add_argument("--no-open", action="store_true", help="print the path only")
    p.set_defaults(func=_explore)


def explorer_page(out: Path) -> Path:
    from visdep_metrics.explorer import PAGE

    page = out if out.suffix == ".html" else out / PAGE
    if not page.is_file():
        raise ExplorerMissingError(f"{page}: no explorer page; `visdep audit ... --out {out}` writes it (an audit "
                                   f"written before visdep had the explorer lacks it: rerun the audit)")
    return page.resolve()


def _explore(args) -> int:
    import webbrowser

    page = explorer_page(args.out)
    print(page)
    if not args.no_open and not webbrowser.open(page.as_uri()):
        print(f"no browser found to open it: open {page.as_uri()} in one")
    return 0
