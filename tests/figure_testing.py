"""What a figure of ``commands/evaluation/plots.py`` shows, read from matplotlib's objects (not the written file)."""
import numpy as np

from tola_plugin.commands.evaluation import plots


def capture_figures(monkeypatch):
    """Record every Figure the plot functions save -> the list they are appended to, as (figure, out_stem)."""
    saved = []
    save = plots._save

    def recording_save(fig, out_stem, *args, **kwargs):
        saved.append((fig, out_stem))
        return save(fig, out_stem, *args, **kwargs)

    monkeypatch.setattr(plots, '_save', recording_save)
    return saved


def scatter_points(ax):
    """The (x, y) points of an axes' scatter series, in drawing order."""
    return [tuple(p) for c in ax.collections for p in np.asarray(c.get_offsets())]


def annotations(ax):
    """The texts annotated on an axes (method names, bar values)."""
    return [t.get_text() for t in ax.texts]


def grid_cells(fig):
    """Rows of a comparison grid -> [(row label, [cell images])], images as arrays."""
    rows = {}
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        rows.setdefault(spec.rowspan.start, []).append((spec.colspan.start, ax))
    out = []
    for r in sorted(rows):
        cells = [ax for _, ax in sorted(rows[r], key=lambda x: x[0])]
        out.append((cells[0].get_ylabel(), [np.asarray(ax.images[0].get_array()) for ax in cells]))
    return out
