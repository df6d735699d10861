"""Checkers for the chapters' exercises: run one on your answer and read its verdicts.

Every chapter's exercises end with the checkers that apply to them; the book runs
each checker once on the chapter's own code, which passes. Call it on your answer
instead (a copy of the chapter's function that you changed, or a new one with the
same arguments). A checker prints one line per case, ``<case>: True`` or
``<case>: False`` followed by what to look at, and returns a :class:`~companion_tools.exercises.verdicts.Verdicts`
that is true when every case passed. It never prints the answer to a question:
it says whether yours computes what one device computes, sends the bytes it
should, or resumes where it stopped.

A checker that starts processes (chapters 3, 6, 9 and 10) needs your function
in a module the worker processes can import: write it to a file next to the
notebook (``%%writefile my_answer.py``) and import it from there.

* ``one_device`` (chapter 1): :func:`~.one_device.check_evaluate`;
* ``split`` (chapter 2): :func:`~.split.check_forward_backward`, :func:`~.split.check_shard_sizes`;
* ``collectives`` (chapter 3): :func:`~.collectives.check_allreduce_algorithm`,
  :func:`~.collectives.check_average_gradients`;
* ``dataparallel`` (chapter 4): :func:`~.dataparallel.check_scatter`;
* ``ddp`` (chapter 5): :func:`~.ddp.check_sampler`;
* ``processes`` (chapters 6, 9 and 10): :func:`~.processes.check_prepare`;
* ``study`` (chapter 7): :func:`~.study.check_method`;
* ``elastic`` (chapter 8): :func:`~.elastic.check_resume`.
"""

from .verdicts import Verdicts

__all__ = ["Verdicts"]
