"""The one exception type users see: a problem with their input, said in one line."""


class BertforgeError(Exception):
    """Bad input or an impossible request. The CLI prints the message alone, without a traceback.

    Messages name the file (and line, where there is one) and the problem, e.g.
    ``data/train.tsv:17: expected 2 columns, found 1``.
    """


def where(path, line=None) -> str:
    """Format a location for an error message: ``path`` or ``path:line``."""
    return f"{path}:{line}" if line is not None else str(path)
