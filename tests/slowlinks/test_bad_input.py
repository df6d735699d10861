"""Bad input to chapter 10's public functions gets a clear error naming the argument, the
value and what to do (the pattern of tests/test_bad_input.py); every row runs in this process,
without a process group or, where the refusal needs one, in a one-process group."""

import pytest
import torch
from torch import nn

import companion.slowlinks as sl
from tests.sharding.test_bad_input import in_group

LIN = nn.Linear(3, 2)


def sgd():
    return torch.optim.SGD(LIN.parameters(), lr=0.1)


# A table, one row per line: not reformatted.
# fmt: off
CASES = [
    ("PowerSGDState rank=0", lambda t: sl.PowerSGDState(0), ValueError, r"rank must be an integer >= 1, got 0: the rank of the approximation"),
    ("PowerSGDState min_compression_rate=-1", lambda t: sl.PowerSGDState(1, min_compression_rate=-1), ValueError, r"min_compression_rate must be >= 0, got -1"),
    ("compressed_size rank=0", lambda t: sl.compressed_size([torch.Size([4, 4])], 0), ValueError, r"rank must be an integer >= 1, got 0"),
    ("LocalSGD period=-1", lambda t: sl.LocalSGD(sgd(), -1), ValueError, r"period must be an integer >= 1, got -1: the steps between meetings"),
    ("LocalSGD model instead of optimizer", lambda t: sl.LocalSGD(LIN, 4), TypeError, r"LocalSGD wraps a torch optimizer, e\.g\. torch\.optim\.SGD"),
    ("LocalSGD without a group", lambda t: sl.LocalSGD(sgd(), 4), RuntimeError, r"LocalSGD needs a process group: call it inside a worker started by companion\.runtime\.launch"),
    ("LocalSGD allreduce=3", lambda t: sl.LocalSGD(sgd(), 4, allreduce=3), TypeError, r"allreduce must be a function such as allreduce_ring, got 3"),
    ("DiLoCo period=0", lambda t: sl.DiLoCo(sgd(), 0), ValueError, r"period must be an integer >= 1, got 0"),
    ("DiLoCo outer_lr=-1", lambda t: sl.DiLoCo(sgd(), 4, outer_lr=-1), ValueError, r"lr must be a positive, finite number, got -1"),
    ("DiLoCo outer_momentum=1", lambda t: sl.DiLoCo(sgd(), 4, outer_momentum=1.0), ValueError, r"outer_momentum must be in \[0, 1\), got 1\.0"),
    ("average_parameters without a group", lambda t: sl.average_parameters(list(LIN.parameters())), RuntimeError, r"average_parameters needs a process group"),
    ("average_parameters empty", lambda t: in_group(lambda: sl.average_parameters([])), ValueError, r"average_parameters needs a list of tensors"),
    ("mean_hook without DDP", lambda t: sl.mean_hook(None, LIN.weight), TypeError, r"a communication hook gets a GradBucket from DDP, got Parameter: wrap the model in DistributedDataParallel"),
    ("cast_hook without DDP", lambda t: sl.cast_hook(None, "bucket"), TypeError, r"GradBucket from DDP, got str"),
    ("fp16_hook without DDP", lambda t: sl.fp16_hook(None, None), TypeError, r"GradBucket from DDP, got NoneType"),
    ("bf16_hook without DDP", lambda t: sl.bf16_hook(None, None), TypeError, r"GradBucket from DDP"),
    ("powersgd_hook without DDP", lambda t: sl.powersgd_hook(sl.PowerSGDState(), None), TypeError, r"GradBucket from DDP"),
    ("check_bucket a tensor", lambda t: sl.check_bucket(torch.zeros(3)), TypeError, r"GradBucket from DDP, got Tensor"),
    ("torch_hook fp8", lambda t: sl.torch_hook("fp8"), ValueError, r"unknown hook 'fp8'"),
    ("communicate_less unknown method", lambda t: sl.communicate_less("gossip", LIN, 0.1), ValueError, r"method must be one of DDP, fp16, .* got 'gossip'"),
    ("communicate_less local SGD H8, a name not in METHODS", lambda t: sl.communicate_less("local SGD H8", LIN, 0.1), ValueError, r"another H or rank: a SlowMethod from local_sgd, diloco, powersgd_at\), got 'local SGD H8'"),
    ("local_sgd period 0", lambda t: sl.local_sgd(0), ValueError, r"period must be an integer >= 1, got 0"),
    ("diloco period 2.5", lambda t: sl.diloco(2.5), TypeError, r"period must be an integer"),
    ("streaming_diloco period 0", lambda t: sl.streaming_diloco(0), ValueError, r"period must be an integer >= 1, got 0"),
    ("powersgd_at rank 0", lambda t: sl.powersgd_at(0), ValueError, r"rank must be an integer >= 1, got 0: PowerSGD's rank"),
    ("hooked fp8", lambda t: sl.hooked("fp8"), ValueError, r"unknown hook 'fp8'"),
    ("train_slowlinks inner_lr 0", lambda t: sl.train_slowlinks(None, "ci", "DiLoCo H16", inner_lr=0), ValueError, r"inner_lr must be a positive, finite number, got 0: AdamW.s rate inside DiLoCo"),
    ("train_slowlinks unknown method", lambda t: sl.train_slowlinks(None, "ci", "PowerSGD"), ValueError, r"method must be one of .*got 'PowerSGD'"),
    ("PowerSGDState start_iter=0", lambda t: sl.PowerSGDState(1, start_iter=0), ValueError, r"start_iter must be an integer >= 1, got 0: DDP regroups its buckets"),
    ("projected_seconds mismatched", lambda t: sl.projected_seconds([1, 2], [], "1 GbE"), ValueError, r"one ledger per epoch record is needed: 2 records, 0 ledgers"),
    ("time_to_accuracy target=90", lambda t: sl.time_to_accuracy([], [], "1 GbE", 90), ValueError, r"target must be a test accuracy in \(0, 1\], got 90"),
    ("quantise bits=3", lambda t: sl.quantise(torch.zeros(4), 3), ValueError, r"bits must be 8 or 4, got 3"),
    ("dequantise bits=16", lambda t: sl.dequantise(torch.zeros(4), torch.ones(1), 16, 4), ValueError, r"bits must be 8 or 4, got 16"),
    ("StreamingDiLoCo without a group", lambda t: sl.StreamingDiLoCo(sgd(), 4), RuntimeError, r"StreamingDiLoCo needs a process group"),
    ("StreamingDiLoCo bits=2", lambda t: in_group(lambda: sl.StreamingDiLoCo(sgd(), 4, bits=2)), ValueError, r"bits must be 8 or 4, got 2"),
    ("StreamingDiLoCo fragments=0", lambda t: in_group(lambda: sl.StreamingDiLoCo(sgd(), 4, fragments=0)), ValueError, r"fragments must be an integer >= 1, got 0"),
    ("StreamingDiLoCo fragments=100", lambda t: in_group(lambda: sl.StreamingDiLoCo(sgd(), 4, fragments=100)), ValueError, r"fragments must be at most the 8 trainable numbers, got 100"),
    ("StreamingDiLoCo delay=2 of period 4 in 2", lambda t: in_group(lambda: sl.StreamingDiLoCo(sgd(), 4, delay=2)), ValueError, r"need 0 <= delay < period / fragments and 0 < mix <= 1, got delay 2"),
    ("StreamingDiLoCo mix=0", lambda t: in_group(lambda: sl.StreamingDiLoCo(sgd(), 4, mix=0)), ValueError, r"0 < mix <= 1"),
    ("link_seconds unknown network", lambda t: sl.link_seconds(None, "5G"), ValueError, r"unknown network '5G'"),
]
# fmt: on


@pytest.mark.parametrize("case, call, error, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(tmp_path, case, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path)
