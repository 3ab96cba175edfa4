"""Result tables as CSV (for machines) and GitHub markdown (for reading), written atomically."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from mcgrpo.store import _atomic_target


def _write_text(path: Path, text: str) -> Path:
    """Write via a temporary file and rename, so a killed job leaves no half-written table."""
    path, tmp = _atomic_target(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _cell(value) -> str:
    """One markdown cell: floats to 4 significant digits, pipes escaped."""
    if isinstance(value, (float, np.floating)):
        return "NaN" if np.isnan(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub markdown table of `df`, numeric columns right-aligned."""
    align = ["---:" if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
             else "---" for c in df.columns]
    lines = [list(map(_cell, df.columns)), align,
             *([_cell(v) for v in row] for row in df.itertuples(index=False, name=None))]
    return "".join(f"| {' | '.join(line)} |\n" for line in lines)


def write_table(df: pd.DataFrame, stem: Path, columns: list[str] | None = None) -> tuple[Path, Path]:
    """Write `<stem>.csv` and `<stem>.md` holding `columns` of `df` (all by default)."""
    df = df if columns is None else df[columns]
    stem = Path(stem)
    return (_write_text(stem.parent / f"{stem.name}.csv", df.to_csv(index=False)),
            _write_text(stem.parent / f"{stem.name}.md", to_markdown(df)))
