"""Figure and page plumbing the reports share: matplotlib (Agg, chosen here for every report module) figures to
base64 PNG, legends, the Jinja templates of ``bench/data/templates/``."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from jinja2 import Environment, FileSystemLoader  # noqa: E402
from matplotlib.legend_handler import HandlerTuple  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from bench.data import TEMPLATES_DIR  # noqa: E402

LOG_SCALE_RATIO = 20.0  # a y axis switches to log above this max/min ratio
#: The white box behind a label drawn over data (``Axes.text``'s ``bbox``).
LABEL_BOX = {"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1}


def png_uri(png: bytes) -> str:
    """A ``data:image/png;base64,…`` URI embedding ``png`` in a page."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def new_figure(width: float, height: float, ncols: int = 1):
    """``(figure, axes)`` of ``ncols`` axes side by side (one axes when 1), ``width`` × ``height`` in at 100 dpi,
    laid out by matplotlib's constrained layout."""
    return plt.subplots(1, ncols, figsize=(width, height), dpi=100, layout="constrained")


def write_plot(plots_dir: Path, name: str, png: bytes) -> str:
    """Write ``png`` to ``plots_dir/<name>.png`` (the folder made when missing); returns its data URI."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    (plots_dir / f"{name}.png").write_bytes(png)
    return png_uri(png)


def say(ax: plt.Axes, text: str, **kw) -> None:
    """``text`` in the middle of ``ax`` (what a plot without data shows); ``kw`` goes to ``Axes.text``."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, **kw)


def save_png(fig: plt.Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed even when saving fails."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def plain_tick(v: float, _pos=None) -> str:
    """A tick's text as a plain number: 0.5, 10, 1,000, 35,000 (``FuncFormatter``'s function)."""
    return f"{v:,g}"


def label_log_axis(axis) -> None:
    """A log-scale ``axis`` (``ax.xaxis``/``ax.yaxis``) labelled at 1, 2 and 5 of each decade as plain numbers,
    so a range inside one decade still gets values to read (3-53 ms: 5, 10, 20, 50)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain_tick))
    axis.set_minor_locator(LogLocator(base=10, subs="auto"))
    axis.set_minor_formatter(NullFormatter())


def spans_wide(values) -> bool:
    """The positive ``values`` (missing ones left out) span more than :data:`LOG_SCALE_RATIO` (max / min)."""
    positive = [float(v) for v in values if v == v and v is not None and v > 0]  # v == v: not NaN
    return bool(positive) and max(positive) / min(positive) > LOG_SCALE_RATIO


def y_scale(ax: plt.Axes, log: bool, label: str, log_label: str, plain_ticks: bool = False) -> None:
    """A log y axis labelled ``log_label`` (:func:`label_log_axis`), or a linear one from 0 labelled ``label``
    (``plain_ticks``: its ticks as plain numbers too)."""
    if log:
        ax.set_yscale("log")
        label_log_axis(ax.yaxis)
        ax.set_ylabel(log_label)
        return
    ax.set_ylim(bottom=0)
    if plain_ticks:
        ax.yaxis.set_major_formatter(FuncFormatter(plain_tick))
    ax.set_ylabel(label)


def legend_above(ax: plt.Axes, handles: list | None = None, ncol: int | None = None,
                 labels: list[str] | None = None) -> None:
    """Legend above the axes so it never covers data, in as many columns as the axes' width holds for its
    longest label (at most ``ncol``); a handle may be a tuple (one entry). Without ``handles``, the axes' labelled
    artists (none: nothing drawn)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if labels is None:
        labels = [h.get_label() for h in handles]
    if not handles:
        return
    width_in = ax.get_position().width * ax.figure.get_figwidth()
    per_row = max(1, int(width_in * 15 // (max(len(text) for text in labels) + 6)))  # ~15 chars per inch
    ax.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=None)}, loc="lower left",
              bbox_to_anchor=(0, 1.01), ncol=min(len(handles), ncol or per_row), frameon=False,
              fontsize="small", borderaxespad=0)


def environment() -> Environment:
    """The Jinja environment over the shipped templates (:data:`bench.data.TEMPLATES_DIR`) (autoescaped, blocks trimmed)."""
    return Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                       trim_blocks=True, lstrip_blocks=True)


def write_page(template: str, out: Path, **context) -> Path:
    """Render the template ``template`` with ``context`` into ``out`` (UTF-8); returns ``out``."""
    out.write_text(environment().get_template(template).render(**context), encoding="utf-8")
    return out
