"""Figures of ``slang plot``, drawn from the records of ``slangcli.plot.plotdata`` (matplotlib, optional extra ``plot``).

Each ``draw_*`` function draws on the ``Axes`` it is given; each ``*_figure`` function returns a new ``Figure``.
Figures are made with matplotlib's object interface on the Agg canvas, never through ``pyplot``: nothing here
opens a window, needs a display or changes the backend of a program that imports it. No numerics happen here
beyond picking axis scales.

Every figure has a title, axis labels with units and a legend, and is readable in greyscale: series differ in line
style and marker as well as colour, and images use a grey scale. Widths suit a paper: one column (3.4 in) for a
single panel, the page (7 in) for several.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import numpy as np
import PIL.Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator

from slangcli.plot.plotdata import Coverage
from slangcli.runfile.outputs import atomic_output

COLUMN_WIDTH = 3.4  # inches
PAGE_WIDTH = 7.0
DPI = 200  # of PNG output: a column is 680 pixels wide
FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 6.5, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "lines.linewidth": 1.2, "lines.markersize": 4, "legend.frameon": False,
    "axes.spines.top": False, "axes.spines.right": False, "figure.titlesize": 9,
    # fonts embedded as TrueType in PDFs, text kept as text in SVGs
    "pdf.fonttype": 42, "svg.fonttype": "none",
}
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (3, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HATCHES = ("", "////", "....", "xxxx", "\\\\\\\\", "++++")
MARKED_POINTS = 8  # markers per training curve (a marker on every epoch would hide the line)
LEGEND_COLUMNS = 2  # most columns of the training figure's legend, under its axes, when its labels fit half a column
LEGEND_LABEL_CHARS = 34  # longest label that does ("final test NLL (per test example)"); longer: one column
LEGEND_ROW = 0.12  # inches per row of that legend
TRAINING_HEIGHT = 2.3  # inches of the training figure without that legend


def series_style(i: int) -> dict:
    """Colour, line style and marker of the i-th series: distinct in greyscale for the first six."""
    return {"color": f"C{i % 10}", "linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas (headless), laid out by matplotlib's constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path, dpi: int = DPI) -> None:
    """Write ``fig`` to ``path`` (``.png``, ``.pdf`` or ``.svg``; ``dpi`` sets a PNG's pixels) through a temporary
    file renamed into place, so a failed save leaves no partial figure.

    A PNG is stored with a palette of 256 colours (Pillow, which matplotlib requires): line art has few colours,
    and the file is about a third of the size of matplotlib's RGBA PNG at no visible cost.
    """
    path = Path(path)
    fmt = FORMATS[path.suffix.lower()]
    with atomic_output(path) as tmp:
        if fmt == "png":
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=dpi)
            image = PIL.Image.open(buffer).convert("RGB")
            image = image.quantize(colors=256, method=PIL.Image.Quantize.MEDIANCUT, dither=PIL.Image.Dither.NONE)
            image.save(tmp, format="png", optimize=True)
        else:
            # no creation date in the file: the same runs give the same PDF and SVG bytes
            fig.savefig(tmp, format=fmt, metadata={"CreationDate": None} if fmt == "pdf" else {"Date": None})


def _spans_decades(values, decades: float = 1.0) -> bool:
    v = np.asarray([x for x in np.ravel(values) if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    return v.size > 1 and bool(np.all(v > 0)) and np.log10(v.max() / v.min()) >= decades


def _wants(log: str, axis: str, auto: bool) -> bool:
    return auto if log == "auto" else axis in log


# ------------------------------------------------------------------------------------------------ training

AXIS_LABELS = {"epoch": "epoch (passes over the training data)", "iteration": "L-BFGS iteration"}


def marker_indices(n: int, log_x: bool) -> np.ndarray:
    """About MARKED_POINTS indices of an n-point curve, evenly spread on a linear or logarithmic x axis (a
    marker on every epoch would hide the line)."""
    if n <= MARKED_POINTS:
        return np.arange(n)
    spread = np.geomspace(1, n, MARKED_POINTS) if log_x else np.linspace(1, n, MARKED_POINTS)
    return np.unique(np.round(spread).astype(int) - 1)


def draw_training(ax, curves, log: str = "auto", first_style: int = 0) -> list:
    """Training records of several runs on shared axes: one line per run (styles from ``first_style`` on), with
    the final -ELBO / N (>) and the final test NLL (*) of each as markers after its last point. Returns the
    legend's handles, for the caller to place: a step method's per-epoch curve is noisy and fills its axes, so a
    legend inside would hide part of it (:func:`training_figure` puts it under the axes)."""
    xs = np.concatenate([c.x for c in curves])
    log_x = _wants(log, "x", bool(np.all(xs > 0)) and xs.max() >= 100)
    finals = []
    for i, c in enumerate(curves, start=first_style):
        st = series_style(i)
        ax.plot(c.x, c.y, label=c.label, markevery=list(marker_indices(c.x.size, log_x)), **st)
        if c.final_elbo is not None and c.axis == "epoch":
            ax.plot([c.x[-1]], [c.final_elbo], marker=">", color=st["color"], linestyle="none", markersize=6)
            finals.append("elbo")
        if c.final_test is not None and c.test_name == "nll":
            ax.plot([c.x[-1]], [c.final_test], marker="*", color=st["color"], linestyle="none", markersize=7)
            finals.append("test")
    ys = np.concatenate([c.y for c in curves])
    if _wants(log, "y", _spans_decades(ys, 0.5)):  # a falling objective reads better on a log scale
        ax.set_yscale("log")
        # ticks as plain numbers (0.3, not 3 x 10^-1), at 2, 3 and 5 times the powers of ten when the range is short
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        if not _spans_decades(ys, 1.5):
            ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))
            ax.yaxis.set_minor_formatter(plain)
    if log_x:
        ax.set_xscale("log")
    kinds = {c.axis for c in curves}
    ax.set_xlabel(AXIS_LABELS[kinds.pop()] if len(kinds) == 1 else "epoch or iteration")
    ax.set_ylabel("nats per training example")
    handles, _ = ax.get_legend_handles_labels()
    if "elbo" in finals:
        handles.append(Line2D([], [], color="0.3", marker=">", linestyle="none", markersize=6,
                              label="final -ELBO / N"))
    if "test" in finals:
        handles.append(Line2D([], [], color="0.3", marker="*", linestyle="none", markersize=7,
                              label="final test NLL (per test example)"))
    return handles


def training_figure(curves, *, title: str | None = None, log: str = "auto") -> Figure:
    """Step methods' epochs and exact solvers' iterations get a panel each, each panel's legend under its axes
    (outside them, so that no curve is hidden however noisy)."""
    with matplotlib.rc_context(STYLE):
        groups = [[c for c in curves if c.axis == a] for a in ("epoch", "iteration")]
        groups = [g for g in groups if g]
        fig = new_figure(COLUMN_WIDTH * len(groups), TRAINING_HEIGHT)
        panels = fig.subfigures(1, len(groups), squeeze=False)[0]
        first, drawn = 0, []
        for panel, group in zip(panels, groups):
            ax = panel.subplots()
            drawn.append(draw_training(ax, group, log, first))  # styles continue across panels: none shared
            first += len(group)
            if group[0].axis == "epoch":
                ax.set_title("step methods: " + ("-ELBO / N" if all(c.quantity == "training -ELBO / N" for c in group)
                                                 else "mean minibatch NLL") + " per epoch")
            else:
                ax.set_title("exact solvers: -ELBO / N per iteration")
        # a sweep's runs are labelled by the settings in which they differ: long labels, one column, a smaller font
        long = any(len(h.get_label()) > LEGEND_LABEL_CHARS for handles in drawn for h in handles)
        rows = max(-(-len(handles) // (1 if long else LEGEND_COLUMNS)) for handles in drawn)
        for panel, handles in zip(panels, drawn):
            # as many rows in every panel where the entries allow, so that the panels' axes line up
            panel.legend(handles=handles, loc="outside lower center", ncol=-(-len(handles) // rows),
                         fontsize=5.5 if long else None)
        fig.set_figheight(TRAINING_HEIGHT + LEGEND_ROW * rows)
        fig.suptitle(title or "Training")
    return fig


# ------------------------------------------------------------------------------------------------ calibration


def draw_reliability(ax_acc, ax_count, items) -> None:
    """Accuracy against mean confidence per bin (non-empty bins), and the examples per bin as bars."""
    edges = items[0].edges
    lo = max(0.0, edges[np.searchsorted(edges, 1.0 / max(it.classes for it in items), side="right") - 1])
    ax_acc.plot([lo, 1], [lo, 1], color="0.5", linestyle=(0, (1, 1)), linewidth=1, marker="",
                label="perfect calibration")
    width = np.diff(edges)
    for i, it in enumerate(items):
        st = series_style(i)
        seen = it.count > 0
        ax_acc.plot(it.confidence[seen], it.accuracy[seen], label=f"{it.label} (ECE {it.ece:.3f})", **st)
        share = width / len(items)
        ax_count.bar(it.edges[:-1] + i * share, it.count, width=share, align="edge", color=st["color"],
                     edgecolor="black", linewidth=0.4, hatch=HATCHES[i % len(HATCHES)], label=it.label)
    ax_acc.set_xlim(lo, 1)
    ax_acc.set_ylim(min(lo, np.nanmin([np.nanmin(it.accuracy) for it in items])) - 0.02, 1.02)
    ax_acc.set_ylabel("accuracy in bin (fraction)")
    ax_acc.legend(loc="upper left")
    counts = np.concatenate([it.count[it.count > 0] for it in items])
    if counts.size and counts.max() / counts.min() > 20:
        ax_count.set_yscale("log")
    ax_count.set_xlim(lo, 1)
    ax_count.set_xlabel("confidence (largest predictive probability)")
    ax_count.set_ylabel("test examples")


def draw_coverage(ax, items) -> None:
    """Observed against nominal coverage of central predictive intervals, in percent."""
    ax.plot([0, 100], [0, 100], color="0.5", linestyle=(0, (1, 1)), linewidth=1, label="perfect calibration")
    for i, it in enumerate(items):
        ax.plot(100 * it.level, 100 * it.observed, label=f"{it.label} ({it.n} targets)", **series_style(i))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("nominal coverage of the central interval (%)")
    ax.set_ylabel("test targets inside it (%)")
    ax.legend(loc="upper left")


def calibration_figure(items, *, title: str | None = None) -> Figure:
    """A reliability diagram with bin counts (classification) or a coverage curve (regression)."""
    with matplotlib.rc_context(STYLE):
        if isinstance(items[0], Coverage):
            fig = new_figure(COLUMN_WIDTH, COLUMN_WIDTH)
            ax = fig.subplots()
            draw_coverage(ax, items)
            fig.suptitle(title or "Calibration: coverage of central predictive intervals")
            return fig
        fig = new_figure(COLUMN_WIDTH, 3.6)
        ax_acc, ax_count = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
        draw_reliability(ax_acc, ax_count, items)
        fig.suptitle(title or f"Reliability diagram ({items[0].edges.size - 1} equal-width bins)")
    return fig


# ------------------------------------------------------------------------------------------------ spectrum


BAR_WIDTH = 0.8  # of the spectrum's bars, in singular-value index units


def draw_spectrum(ax, layer: int, spectra, top: int) -> None:
    """Explained variance (%) of the first ``top`` singular values of one weight matrix, for each run: bars for
    one run, lines for several; a compression's kept rank as a dashed line."""
    m, n = spectra[0].shapes[layer]
    for i, s in enumerate(spectra):
        ev = 100 * s.explained[layer][:top]
        idx = np.arange(1, ev.size + 1)
        if len(spectra) == 1:
            # one run: named in the title, so the legend holds only the kept rank
            ax.bar(idx, ev, width=BAR_WIDTH, color="0.55", edgecolor="black", linewidth=0.5, label="_" + s.label)
            # from the bar's left edge rightwards, clear of the y axis and its tick labels
            ax.annotate(f"{ev[0]:.3g} %", (1 - BAR_WIDTH / 2, ev[0]), xytext=(1, 2), textcoords="offset points",
                        ha="left", va="bottom", fontsize=6.5)
        else:
            ax.plot(idx, ev, label=s.label, **series_style(i))
        if s.kept is not None:
            k = s.kept[layer]
            ax.axvline(k + 0.5, color="black", linestyle="--", linewidth=1,
                       label=f"kept rank ({s.label})" if len(spectra) > 1 else "kept rank k")
    ax.set_yscale("log")
    ax.set_xlim(0.4, min(top, max(x.explained[layer].size for x in spectra)) + 0.6)
    ax.set_ylim(top=400)  # room for the label of the first bar
    shown = min(top, max(x.explained[layer].size for x in spectra))
    ax.set_xticks(range(1, shown + 1) if shown <= 10 else range(1, shown + 1, max(1, shown // 5)))
    ax.set_title(f"weight matrix {layer + 1} ({m} x {n})")
    ax.set_xlabel("singular value i")


def spectrum_figure(spectra, *, top: int = 10, title: str | None = None) -> Figure:
    n_layers = len(spectra[0].shapes)
    with matplotlib.rc_context(STYLE):
        width = COLUMN_WIDTH if n_layers == 1 else min(PAGE_WIDTH, 2.4 * n_layers)
        fig = new_figure(width, 2.5)
        axes = fig.subplots(1, n_layers, squeeze=False)[0]
        for layer, ax in enumerate(axes):
            draw_spectrum(ax, layer, spectra, top)
        axes[0].set_ylabel("explained variance (%)")
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(loc="upper right")  # where the small singular values leave room
        default = ("Spectrum of the posterior standard deviations" if n_layers == 1 else
                   "Explained variance per singular value of the posterior standard deviations")
        if len(spectra) == 1:
            default += f"\n{spectra[0].label}"
        fig.suptitle(title or default)
    return fig


# ------------------------------------------------------------------------------------------------ posterior


def draw_identity(ax, values) -> None:
    lo, hi = np.min(values), np.max(values)
    ax.plot([lo, hi], [lo, hi], color="0.5", linestyle=(0, (1, 1)), linewidth=1, marker="", label="equal")


def draw_means(ax, ref_mean, comparisons) -> None:
    draw_identity(ax, np.concatenate([ref_mean, *[c.mean for c in comparisons]]))
    for i, c in enumerate(comparisons):
        st = series_style(i)
        ax.plot(ref_mean, c.mean, linestyle="none", marker=st["marker"], markersize=3, markerfacecolor="none",
                markeredgewidth=0.6, color=st["color"], label=c.label)
    ax.set_xlabel("reference mean")
    ax.set_ylabel("posterior mean")
    ax.set_title("means")


def draw_variances(ax, ref_var, comparisons) -> None:
    """Marginal variances (log-log axes when they span decades): points below the diagonal are variances a method
    underestimates."""
    draw_identity(ax, np.concatenate([ref_var, *[c.variance for c in comparisons]]))
    for i, c in enumerate(comparisons):
        st = series_style(i)
        ax.plot(ref_var, c.variance, linestyle="none", marker=st["marker"], markersize=3, markerfacecolor="none",
                markeredgewidth=0.6, color=st["color"], label=f"{c.label} (sym. KL {c.symmetric_kl:.3g})")
    if _spans_decades(np.concatenate([ref_var, *[c.variance for c in comparisons]])):
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("reference marginal variance")
    ax.set_ylabel("posterior marginal variance")
    ax.set_title("marginal variances")


def off_diagonal(cov: np.ndarray) -> np.ndarray:
    """The covariance with its diagonal set to 0, so that the image's scale shows the off-diagonal entries."""
    out = np.array(cov, dtype=float)
    np.fill_diagonal(out, 0.0)
    return out


def draw_covariance(ax, cov, limit, label):
    """The off-diagonal covariances as a grey-scale image (black negative, white positive, mid-grey zero),
    on colour limits shared by all panels."""
    image = ax.imshow(off_diagonal(cov), cmap="gray", vmin=-limit, vmax=limit, interpolation="nearest")
    ax.set_title(label, fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])
    return image


def posterior_figure(reference, comparisons, *, title: str | None = None) -> Figure:
    """Means and marginal variances of the weights against the reference's, and the off-diagonal covariances
    among the first weights of the reference and each run side by side on one grey scale (saturating at the
    reference's 99th percentile of absolute off-diagonal covariance, so that the structure shows)."""
    with matplotlib.rc_context(STYLE):
        fig = new_figure(PAGE_WIDTH, 4.9)
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.55, 1])
        ax_mean, ax_var = top.subplots(1, 2)
        draw_means(ax_mean, reference.mean, comparisons)
        draw_variances(ax_var, reference.variance, comparisons)
        ax_var.legend(loc="upper left", title=f"against {reference.label}", title_fontsize=6.5)
        panels = [(reference.label + " (reference)", reference.covariance)]
        panels += [(c.label, c.covariance) for c in comparisons]
        ref_off = np.abs(off_diagonal(reference.covariance))
        limit = float(np.percentile(ref_off[ref_off > 0], 99)) if np.any(ref_off > 0) else 1.0
        axes = np.atleast_1d(bottom.subplots(1, len(panels)))
        image = None
        for ax, (label, cov) in zip(axes, panels):
            image = draw_covariance(ax, cov, limit, label)
        bar = bottom.colorbar(image, ax=list(axes), shrink=0.8, pad=0.01, extend="both")
        bar.set_label("covariance", fontsize=7)
        bottom.suptitle(f"off-diagonal covariances of the first {reference.covariance.shape[0]} weights "
                        "(diagonal set to 0)", fontsize=8)
        fig.suptitle(title or f"Posterior of the weights against {reference.label} (biases left out)")
    return fig


# ------------------------------------------------------------------------------------------------ sweep

PARAM_LABELS = {
    "rank": "rank (SLANG L, k-tied k)", "prior_precision": "prior precision lambda", "lr": "learning rate",
    "beta": "precision rate beta_0", "batch_size": "minibatch size M (examples)", "epochs": "epochs",
    "iterations": "steps", "samples": "weight samples per step S", "noise_precision": "noise precision tau",
    "compress_rank": "compression rank k", "hidden": "hidden layer widths", "decay": "rate decay exponent",
    "init_std": "initial standard deviation", "init_precision": "initial precision",
}


SE_CAP = 4.0  # points: the standard-error caps reach past the 3.5-point markers


def draw_sweep(ax, sweep, log: str = "auto") -> None:
    """Mean and standard error of the metric at each swept value, one line per method; a method without the
    swept parameter as a horizontal line with its standard-error band."""
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool)
                  for s in sweep.series for x in s.x if x is not None)
    categories = [] if numeric else sorted({str(x) for s in sweep.series for x in s.x if x is not None})
    for i, s in enumerate(sweep.series):
        st = series_style(i)
        pts = [(x, m, e) for x, m, e in zip(s.x, s.mean, s.se) if x is not None]
        level = [(m, e) for x, m, e in zip(s.x, s.mean, s.se) if x is None]
        if pts:
            xs = [x if numeric else categories.index(str(x)) for x, _, _ in pts]
            # hollow markers and caps wider than them: a standard error smaller than a marker still shows
            ax.errorbar(xs, [m for _, m, _ in pts], yerr=[e for _, _, e in pts], capsize=SE_CAP, capthick=0.9,
                        elinewidth=0.9, markersize=3.5, markerfacecolor="none", markeredgewidth=0.9,
                        label=s.label, **st)
        for m, e in level:
            ax.axhline(m, color=st["color"], linestyle=st["linestyle"], linewidth=1.2, label=s.label)
            ax.axhspan(m - e, m + e, color=st["color"], alpha=0.15, linewidth=0)
    xs = [x for s in sweep.series for x in s.x if x is not None]
    if numeric and _wants(log, "x", _spans_decades(xs)):
        ax.set_xscale("log")
    if _wants(log, "y", _spans_decades(np.concatenate([s.mean for s in sweep.series]), 2)):
        ax.set_yscale("log")
    if not numeric:
        ax.set_xticks(range(len(categories)), categories)
    elif len(set(xs)) <= 8:
        ax.set_xticks(sorted(set(xs)), [f"{x:g}" for x in sorted(set(xs))])
        ax.minorticks_off()
    ax.set_xlabel(PARAM_LABELS.get(sweep.param, sweep.param))
    ax.legend()


def sweep_figure(sweep, metric_label: str, *, title: str | None = None, log: str = "auto") -> Figure:
    with matplotlib.rc_context(STYLE):
        fig = new_figure(COLUMN_WIDTH, 2.7)
        ax = fig.subplots()
        draw_sweep(ax, sweep, log)
        ax.set_ylabel(metric_label)
        reps = f"mean +- s.e. over {sweep.replicates} seeds or splits" if sweep.replicates > 1 else "one run each"
        what = PARAM_LABELS.get(sweep.param, sweep.param)
        fig.suptitle(title or f"{metric_label.split(' (')[0]} against {what}\n({reps})")
    return fig
