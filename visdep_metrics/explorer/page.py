"""`OUT/explorer.html`: one self-contained page (plotly.js, DataTables from itables, the audit's data) that opens
from disk with no server and no network; contact sheets beside it in OUT/frames/."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path

from loguru import logger

from visdep_metrics.audit.compute import Audit

PAGE = "explorer.html"
TEMPLATE = "template.html.j2"
SCRIPT = "explorer.js"  # the page's own code, inlined beside the libraries
# Every string of the page comes from data someone else wrote (benchmarks, samples files, model names), so no script
# runs but the page's own three, each allowed by its hash ('unsafe-inline' is not allowed: an injected handler or
# element would not run); nothing is fetched and images come from the page's folder (file:) or data: URLs.
# Chromium honours form-action and base-uri in a <meta> policy; it never shipped navigate-to, so navigation is
# limited by the page having no link or script from data (docs/explorer.md).
POLICY = ("default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src file: data:; font-src data:; "
          "form-action 'none'; base-uri 'none'")


@functools.cache
def _libraries() -> dict[str, str]:
    """plotly.js and itables' DataTables bundle, as inline script text. The bundle is an ES module: its one export
    statement becomes a global, so the page loads it from an inline script, not from a blob or a URL."""
    import itables
    import plotly.offline

    bundle = Path(itables.__file__).parent / "html" / "dt_bundle.js"
    source = bundle.read_text(encoding="utf-8")
    found = list(re.finditer(r"export\s*\{([^}]*)\}\s*;?", source))
    if not found:
        raise RuntimeError(f"{bundle}: no export statement; itables changed its bundle")
    exports = found[-1]  # the module's last statement, before the licence comments
    names = {alias.strip(): local.strip() for local, _, alias in
             (part.strip().partition(" as ") for part in exports.group(1).split(","))}
    assignment = "window.DTBundle = {" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in names.items()) + "};"
    return {"plotly": _inline(plotly.offline.get_plotlyjs()),
            "datatables": _inline(source[:exports.start()] + assignment + source[exports.end():]),
            "page_script": _inline((Path(__file__).parent / SCRIPT).read_text(encoding="utf-8")),
            "datatables_css": bundle.with_suffix(".css").read_text(encoding="utf-8").replace("</", "<\\/")}


def script_hash(script: str) -> str:
    """The CSP source that allows one inline script: the base64 sha256 of its text as UTF-8."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"


def _inline(script: str) -> str:
    """Script text safe inside <script>: "<!--", "<script" and "</script" end or derail a script element in HTML;
    in the bundles they occur in strings and regular expressions only, where \\x3c reads as "<"."""
    return re.sub(r"<(?=!--|/?script)", r"\\x3c", script, flags=re.IGNORECASE)


def _safe_json(data: dict) -> str:
    """JSON that can sit inside a <script> element: "<" (and the line separators JSON allows) as escapes."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _clean(value):
    """NaN and infinities as null (JSON has neither)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def render_page(data: dict) -> str:
    import jinja2

    environment = jinja2.Environment(loader=jinja2.PackageLoader("visdep_metrics.explorer", "."),
                                     autoescape=jinja2.select_autoescape(["html", "j2"]))
    libraries = _libraries()
    scripts = [libraries[name] for name in ("plotly", "datatables", "page_script")]
    return environment.get_template(TEMPLATE).render(
        data=_safe_json(_clean(data)), plotly=scripts[0], datatables=scripts[1], page_script=scripts[2],
        datatables_css=libraries["datatables_css"], policy=POLICY.format(hashes=" ".join(map(script_hash, scripts))))


def write_explorer(audit: Audit, folder: Path, previous: Path | None = None,
                   video_roots: Mapping[str, Path] | None = None) -> Path:
    """Write `folder`/explorer.html and its contact sheets (`folder`/frames/); `previous`: an earlier audit's
    folder whose sheets of unchanged videos are reused; `video_roots`: benchmark -> root folder of its videos
    (default: the benchmark's environment variable)."""
    from visdep_metrics.explorer.data import explorer_data
    from visdep_metrics.explorer.frames import write_sheets

    started = time.perf_counter()
    sheets, max_frames, note = write_sheets(audit, folder, previous, video_roots or {})
    path = folder / PAGE
    path.write_text(render_page(explorer_data(audit, sheets, max_frames, note)), encoding="utf-8")
    logger.info(f"wrote {path.name} ({path.stat().st_size / 1e6:.1f} MB, {len(sheets)} contact sheet(s)) in "
                f"{time.perf_counter() - started:.2f} s")
    return path
