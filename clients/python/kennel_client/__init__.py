"""kennel_client: a Python SDK for kennel sessions.

One object per session; one call runs a cell and returns everything it produced:

    from kennel_client import Session

    with Session("work", memory=512 << 20) as s:
        ex = s.run("import numpy as np; np.arange(3).sum()")
        print(ex.text)          # '3'

Pure Python over Debian's jupyter_client and pyzmq. See docs/sdk.md.
"""

from .session import (Error, Execution, File, KennelError, Output, Session,
                      default_state_dir, strip_ansi)

__all__ = ["Error", "Execution", "File", "KennelError", "Output", "Session",
           "default_state_dir", "strip_ansi"]
__version__ = "0.1"
