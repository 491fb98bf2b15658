"""HTML pieces shared by the diagnostics' notebook displays and the report."""

from __future__ import annotations

import pandas as pd


def scrollable(table_html: str) -> str:
    """Wrap an HTML table so that, when wider than the page, it scrolls sideways by itself
    instead of widening the page (inline style: it must work in notebooks too)."""
    return f"<div class='bayesmv-scroll' style='max-width:100%;overflow-x:auto'>{table_html}</div>"


def frame_html(frame: pd.DataFrame, float_format=None) -> str:
    """``frame`` as a scrollable bayesmv table, its index name in the top-left corner
    rather than on a header row of its own."""
    if frame.index.name is not None and frame.columns.name is None:
        frame = frame.rename_axis(index=None, columns=frame.index.name)
    return scrollable(frame.to_html(float_format=float_format, classes="bayesmv-table"))
