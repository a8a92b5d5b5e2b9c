"""Bench: the explorer page (`OUT/explorer.html`) of the audit bench's tree, 100,000 questions x 10 models.

Builds (or reuses, with --workdir) the tree `bench_audit.py` writes, runs the audit in this process (not timed
here: `bench_audit.py` times the whole command, explorer included), then times `write_explorer` alone and reports
the page's size and what it is made of: the inlined libraries, and the data blob by part (per-question columns,
question texts and options, the models' option probabilities and picks, the panel's terms).

    python bench/bench_explorer.py [--questions 100000] [--models 10] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_audit import write_tree  # noqa: E402

from visdep_metrics.parallel import cpu_seconds  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--workdir", type=Path, help="where the tree is (reused when its shape matches)")
    args = parser.parse_args()
    from visdep_metrics.audit.compute import run_audit
    from visdep_metrics.explorer import write_explorer
    from visdep_metrics.explorer.page import _libraries

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_explorer_"))
    runs, panel, marker = work / "runs", work / "panel.yaml", work / "explorer-tree.json"
    shape = {"questions": args.questions, "models": args.models}
    if not (marker.is_file() and json.loads(marker.read_text()) == shape):
        start = time.perf_counter()
        models = write_tree(runs, args.questions, args.models, True)
        panel.write_text(json.dumps({"text_llms": models[:3], "vlms": models[3:8], "held_out": models[8:]}))
        marker.write_text(json.dumps(shape))
        print(f"tree written in {time.perf_counter() - start:.1f} s (not timed)")
    start = time.perf_counter()
    audit = run_audit([runs], panel_path=panel)
    print(f"audit computed in {time.perf_counter() - start:.1f} s (not the explorer's)")
    _libraries()  # read once per process, as the audit does before its first page; timed apart
    out = Path(tempfile.mkdtemp(prefix="page_", dir=work))
    start, cpu = time.perf_counter(), cpu_seconds()
    page = write_explorer(audit, out)
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    text = page.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S).group(1))
    size = {"questions columns": len(json.dumps({k: v for k, v in data["questions"].items()
                                                 if k not in ("question", "options")})),
            "question texts and options": len(json.dumps([data["questions"]["question"],
                                                           data["questions"]["options"]], ensure_ascii=False)),
            "option probabilities and picks": len(json.dumps(data["answers"])),
            "panel terms": len(json.dumps(data["terms"])),
            "libraries (plotly.js, DataTables)": sum(len(v) for v in _libraries().values())}
    total = len(text.encode("utf-8"))
    print(f"explorer.html: {args.questions} questions x {args.models} models: {total / 1e6:.1f} MB, written in "
          f"{wall:.2f} s (CPU {cpu:.2f} s)")
    for part, n in size.items():
        print(f"  {part}: {n / 1e6:.1f} MB")
    if Path(CHROMIUM).is_file():
        texts, _ = data["questions"]["question"]  # the table of distinct question texts
        in_browser(page, texts[len(texts) // 2])
    return 0


def in_browser(page: Path, text: str) -> None:
    """Headless Chromium on the page: time to ready, to move τ, to search a question's text."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        start = time.perf_counter()
        tab.goto(page.as_uri())
        tab.wait_for_selector("body[data-ready='1']", timeout=300_000)
        ready = time.perf_counter() - start
        moved = tab.evaluate("""() => { const t = performance.now(); explorer.setTau("0.3");
                                        return performance.now() - t; }""")
        tab.click("#tab-questions")
        searched = tab.evaluate("""text => { const t = performance.now(); explorer.table.search(text).draw();
            return [performance.now() - t, explorer.table.rows({search: 'applied'}).count()]; }""", text)
        browser.close()
    print(f"in headless Chromium: ready {ready:.1f} s after opening, τ moved in {moved / 1e3:.2f} s, a search "
          f"drawn in {searched[0] / 1e3:.2f} s ({searched[1]} rows)")


if __name__ == "__main__":
    sys.exit(main())
