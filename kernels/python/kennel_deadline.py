"""kennel_deadline: the exception a cell gets when it runs past its deadline.

kenneld enforces a per-cell deadline by sending SIGUSR2 to the session's process group;
InterruptGate (kennel_pipe) turns it into CellTimeout inside the running cell, as it
turns SIGINT into KeyboardInterrupt. KennelShell puts CellTimeout in the user namespace,
so cells can write `except CellTimeout:`; `except TimeoutError:` catches it as well.
"""


class CellTimeout(TimeoutError):
    """The cell ran past the deadline kenneld set for it."""

    # No __init__ (the message comes from __str__): the signal handler creates the
    # exception, and Python code run there could be cut short by the next signal.
    def __str__(self):
        return super().__str__() or "the cell ran past its deadline"
