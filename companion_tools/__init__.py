"""companion_tools: the book's tools, kept apart from the code readers study.

``companion`` is what the chapters teach; this package measures and checks it and is
never imported by it (``tests/test_layout.py``). It ships in the same wheel, so a
Colab reader runs the same commands:

* ``bench``: the benchmarks behind every speed claim, ``python -m companion_tools.bench --help``;
  their committed records are package data (``bench/results/``);
* ``pictures`` (chapters 2-5): figures drawn from recorded runs of the taught code,
  ``split``, ``ring``, ``shards``, ``dataparallel``, ``sampler``;
* ``exercises`` (every chapter): the checkers readers run on their answers to the
  chapters' exercises, one module per chapter's package.
"""
