"""The one exception type users see: a problem with their input, said in one line; and system errors said so."""

import errno


class BertforgeError(Exception):
    """Bad input or an impossible request. The CLI prints the message alone, without a traceback.

    Messages name the file (and line, where there is one) and the problem, e.g.
    ``data/train.tsv:17: expected 2 columns, found 1``.
    """


def where(path, line=None) -> str:
    """Format a location for an error message: ``path`` or ``path:line``."""
    return f"{path}:{line}" if line is not None else str(path)


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def os_error_message(e: OSError) -> str:
    """One line for a failed file operation: the file and what went wrong, a full disk said in plain words."""
    name = f"{e.filename}: " if e.filename else ""
    if e.errno in FULL or (e.errno is None and "requested and" in str(e)):  # numpy's short write
        return f"{name}could not be written: no space left (the disk is full or a file-size limit was reached)"
    return f"{name}{(e.strerror or str(e)).lower()}"
