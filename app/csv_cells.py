"""The CSV-injection escaping every CSV of this project uses; defined in the client package
(iclaudit/csv_cells.py) so that the server and the light client share one function."""

from iclaudit.csv_cells import safe_cell, safe_row

__all__ = ["safe_cell", "safe_row"]
