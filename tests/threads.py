"""The one-process side of an equivalence test, computed at several torch thread counts.

A process on the CPU splits its large sums across its threads, so the order of its additions,
and in float32 their last bits, depends on how many threads it has; a launched worker has
``max(1, cores // world_size)``. One ulp can flip a max-pool or ReLU decision and grow, so the
chapters' checks against one process compute in float64, and the tests run the reference at
1, 2 and 4 threads to show that the verdict does not depend on it.
"""

import torch

THREADS = (1, 2, 4)


def at_each_thread_count(reference, threads=THREADS) -> dict:
    """``{n: reference()}`` for each ``n`` of ``threads``, computed under
    ``torch.set_num_threads(n)``; the process's count is restored afterwards, also on an error."""
    saved, out = torch.get_num_threads(), {}
    try:
        for n in threads:
            torch.set_num_threads(n)
            out[n] = reference()
    finally:
        torch.set_num_threads(saved)
    return out
