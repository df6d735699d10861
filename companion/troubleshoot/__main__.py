"""``python -m companion.troubleshoot``: the crashing run of :mod:`.crash`, for torchrun.

Used in: the troubleshooting appendix.
"""

from .crash import main

main()
