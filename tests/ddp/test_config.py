"""What `python -m companion.ddp` prints about its configuration."""

import pytest

from companion.ddp import DDPConfig

pytestmark = pytest.mark.ch5


def test_one_process_is_announced_in_the_singular(capsys):
    """Issue 36: `python -m companion.ddp` on one process printed "1 processes"."""
    import torch.distributed as dist

    from companion.ddp.training import _announce

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        _announce(DDPConfig(profile="ci", verbose=True).resolve(1), 1)
    finally:
        dist.destroy_process_group()
    assert capsys.readouterr().out.startswith("DDP: 1 process (gloo), model lenet")
