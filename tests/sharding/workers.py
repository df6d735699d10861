"""Workers for the chapter-9 tests (importable by the launcher's fork server as
``tests.sharding.workers``)."""
from companion.sharding import sharded_worker


def several(rank, world_size, data, methods, **options):
    """Chapter 5's loop with each of ``methods`` in turn (``ci`` profile)."""
    return [sharded_worker(rank, world_size, data, "ci", method=m, **options) for m in methods]
