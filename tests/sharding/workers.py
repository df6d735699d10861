"""Workers for the chapter-9 tests (importable by the launcher's fork server as
``tests.sharding.workers``)."""
from companion.sharding import sharded_worker


def several(rank, world_size, data, methods, **options):
    """Chapter 5's loop with each of ``methods`` in turn (``ci`` profile)."""
    return [sharded_worker(rank, world_size, data, "ci", method=m, **options) for m in methods]


def old_names_worker(rank, world_size, methods):
    """``state_worker`` with torch.distributed as torch before 2.13 has it: no
    ``reduce_scatter_single`` or ``all_gather_single``, only the older names."""
    import torch.distributed as dist

    from companion.sharding.measure import state_worker

    hidden = {n: getattr(dist, n) for n in ("reduce_scatter_single", "all_gather_single")
              if hasattr(dist, n)}
    for name in hidden:
        delattr(dist, name)
    try:
        return state_worker(rank, world_size, methods)
    finally:
        for name, real in hidden.items():
            setattr(dist, name, real)
