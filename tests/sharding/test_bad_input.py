"""Bad input to chapter 9's public functions gets a clear error naming the argument, the
value and what to do (the pattern of tests/test_bad_input.py). Every row runs in this process,
without a process group (the checks come before any collective) or, where the refusal needs a
sharded model, in a one-process group with an in-memory store."""

import pytest
import torch
from torch import nn

import companion.runtime as rt
import companion.sharding as sh

LIN = nn.Linear(3, 2)


def in_group(call):
    """``call()`` inside a one-process gloo group, ended afterwards."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return call()
    finally:
        dist.destroy_process_group()


def _sparse_parameter() -> nn.Module:
    net = nn.Module()
    net.w = nn.Parameter(torch.eye(2).to_sparse())
    return net


def sharded_twice(first, second):
    net = nn.Sequential(nn.Linear(3, 2))
    first(net, torch.optim.SGD, lr=0.1)
    second(net, torch.optim.SGD, lr=0.1)  # a notebook cell run twice


def zero3_then(read):
    net = nn.Sequential(nn.Linear(3, 2))
    sh.Zero3(net, torch.optim.SGD, lr=0.1)  # the units are freed at once
    read(net)


def bench_cli(option, value):
    from companion_tools.bench.sharding import main

    main([option, value])


# A table, one row per line: not reformatted.
# fmt: off
CASES = [
    ("padded_size world_size=0", lambda t: sh.padded_size(10, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("padded_size world_size=2.5", lambda t: sh.padded_size(10, 2.5), TypeError, r"world_size must be an integer >= 1, got 2\.5 of type float"),
    ("padded_size numel=-1", lambda t: sh.padded_size(-1, 2), ValueError, r"numel must be an integer >= 0, got -1"),
    ("FlatShards rank=5 of 2", lambda t: sh.FlatShards([LIN.weight], 2, 5), ValueError, r"rank must be at most 1, got 5: pass this process's rank"),
    ("FlatShards rank=-1", lambda t: sh.FlatShards([LIN.weight], 2, -1), ValueError, r"rank must be an integer >= 0, got -1"),
    ("shard lr=-1", lambda t: sh.shard("ZeRO-1", nn.Linear(3, 2), torch.optim.SGD, lr=-1), ValueError, r"lr must be a positive, finite number, got -1"),
    ("shard momentum=-0.5", lambda t: sh.shard("ZeRO-1", nn.Linear(3, 2), torch.optim.SGD, lr=0.1, momentum=-0.5), ValueError, r"momentum must be a number in \[0, 1\), got -0\.5"),
    ("shard momentum=1.5", lambda t: sh.shard("ZeRO-3", nn.Linear(3, 2), torch.optim.SGD, lr=0.1, momentum=1.5), ValueError, r"momentum must be a number in \[0, 1\), got 1\.5: e\.g\. 0\.9"),
    ("FlatShards no parameters", lambda t: sh.FlatShards([], 2, 0), ValueError, r"at least one parameter"),
    ("FlatShards mixed dtypes", lambda t: sh.FlatShards([LIN.weight, nn.Parameter(torch.zeros(2, dtype=torch.float64))], 2, 0), ValueError, r"one dtype on one device.*net\.to"),
    ("Zero1 without a group", lambda t: sh.Zero1(nn.Linear(3, 2), torch.optim.Adam), RuntimeError, r"Zero1 needs a process group.*companion\.runtime\.launch"),
    ("Zero2 without a group", lambda t: sh.Zero2(nn.Linear(3, 2), torch.optim.Adam), RuntimeError, r"Zero2 needs a process group"),
    ("Zero3 param_dtype float64", lambda t: sh.Zero3(nn.Linear(3, 2), torch.optim.Adam, param_dtype=torch.float64), ValueError, r"unknown param_dtype torch\.float64; choose one of \[None, torch\.bfloat16, torch\.float16\]"),
    ("saved_weight_bytes not a model", lambda t: sh.saved_weight_bytes([nn.Linear(3, 2)], torch.zeros(1, 3)), TypeError, r"model must be a torch\.nn\.Module"),
    ("Zero3 without a group", lambda t: sh.Zero3(nn.Linear(3, 2), torch.optim.Adam), RuntimeError, r"Zero3 needs a process group"),
    ("Zero1 optimizer instance", lambda t: sh.Zero1(LIN, torch.optim.SGD(LIN.parameters(), lr=1)), TypeError, r"optimizer_class must be a torch\.optim\.Optimizer class such as torch\.optim\.Adam"),
    ("Zero2 net not a module", lambda t: sh.Zero2("net", torch.optim.Adam), TypeError, r"net"),
    ("fsdp2 without a group", lambda t: sh.fsdp2(nn.Linear(3, 2), torch.optim.Adam), RuntimeError, r"fsdp2 needs a process group"),
    ("zero_redundancy without a group", lambda t: sh.zero_redundancy(nn.Linear(3, 2), torch.optim.Adam), RuntimeError, r"zero_redundancy needs a process group"),
    ("mixed_precision_policy a precision name", lambda t: sh.mixed_precision_policy("bf16"), TypeError, r"mode must be of type MathMode, got str: pass MathMode\(precision, device\), or None for fp32"),
    ("ShardedScaler init_scale=0", lambda t: sh.ShardedScaler(0), ValueError, r"init_scale must be a positive, finite number, got 0"),
    ("ShardedScaler backoff_factor=1", lambda t: sh.ShardedScaler(backoff_factor=1.0), ValueError, r"backoff_factor must lie in \(0, 1\), got 1\.0"),
    ("ShardedScaler growth_interval=0", lambda t: sh.ShardedScaler(growth_interval=0), ValueError, r"growth_interval must be an integer >= 1, got 0"),
    ("ShardedScaler update before step", lambda t: sh.ShardedScaler().update(), RuntimeError, r"ShardedScaler\.update\(\) needs a step\(\) first"),
    ("check_same_start without a group", lambda t: sh.check_same_start(nn.Linear(3, 2)), RuntimeError, r"check_same_start needs a process group"),
    ("check_same_start not a model", lambda t: sh.check_same_start("net"), TypeError, r"net must be a torch\.nn\.Module"),
    ("check_gradient_scale world_size=0", lambda t: sh.check_gradient_scale(1.0, 1.0, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("check_gradient_scale one_process_norm=0", lambda t: sh.check_gradient_scale(1.0, 0.0, 2), ValueError, r"one_process_norm must be a positive, finite number, got 0\.0.*the one-process gradient is not 0"),
    ("check_reduce_dtype one rank", lambda t: sh.check_reduce_dtype([torch.ones(100)], 1), ValueError, r"world_size must be at least 2: one rank reduces nothing"),
    ("check_reduce_dtype not tensors", lambda t: sh.check_reduce_dtype([[0.5] * 100], 2), TypeError, r"grads must be a non-empty sequence of tensors"),
    ("check_reduce_dtype too few values", lambda t: sh.check_reduce_dtype([torch.ones(10)], 2), ValueError, r"grads hold 10 nonzero values; the test needs at least 64"),
    ("load_full_state_dict without a group", lambda t: sh.load_full_state_dict(nn.Linear(3, 2), {}), RuntimeError, r"load_full_state_dict needs a process group"),
    ("load_full_state_dict not a dict", lambda t: sh.load_full_state_dict(nn.Linear(3, 2), [1]), TypeError, r"state_dict must be a dict, got list"),
    ("load_full_state_dict empty on rank 0", lambda t: in_group(lambda: sh.load_full_state_dict(nn.Linear(3, 2), {})), ValueError, r"rank 0 passed an empty state_dict: rank 0 reads the file"),
    ("pitfalls_worker n=1 on 2", lambda t: sh.pitfalls_worker(0, 2, 1), ValueError, r"n must be an integer >= 2, got 1.*each rank needs a sample"),
    ("check_gradients_reduced not a model", lambda t: sh.check_gradients_reduced("net"), TypeError, r"model must be a torch\.nn\.Module"),
    ("device_mesh without a group", lambda t: sh.device_mesh("cpu"), RuntimeError, r"device_mesh needs a process group"),
    ("device_mesh replicas=2 on 1 rank", lambda t: in_group(lambda: sh.device_mesh("cpu", 2)), ValueError, r"replicas must be at most 1, got 2"),
    ("fsdp2 replicas=0", lambda t: in_group(lambda: sh.fsdp2(nn.Linear(3, 2), torch.optim.SGD, replicas=0, lr=0.1)), ValueError, r"replicas must be an integer >= 1, got 0"),
    ("split_bytes shards=0", lambda t: sh.split_bytes([], 1, 0), ValueError, r"shards must be an integer >= 1, got 0"),
    ("split_bytes replicas=1.5", lambda t: sh.split_bytes([], 1.5, 1), TypeError, r"replicas must be an integer >= 1, got 1\.5"),
    ("gradient_shards a model", lambda t: sh.gradient_shards(nn.Linear(3, 2)), TypeError, r"optimizer must be of type Optimizer, got Linear: pass the optimizer that steps"),
    ("shard unknown method", lambda t: sh.shard("ZeRO-4", nn.Linear(3, 2)), ValueError, r"unknown method 'ZeRO-4'; choose one of"),
    ("formula_bytes unknown method", lambda t: sh.formula_bytes("ZeRO-9", 10, 2), ValueError, r"unknown method 'ZeRO-9'"),
    ("formula_bytes unknown precision", lambda t: sh.formula_bytes("DDP", 10, 2, "fp8"), ValueError, r"unknown precision 'fp8'"),
    ("formula_bytes psi=-1", lambda t: sh.formula_bytes("DDP", -1, 2), ValueError, r"psi must be an integer >= 0, got -1"),
    ("formula_bytes world_size=0", lambda t: sh.formula_bytes("DDP", 10, 0), ValueError, r"world_size must be .*got 0"),
    ("fits memory_gib=0", lambda t: sh.fits(10, 2, 0, "DDP"), ValueError, r"memory_gib must be .*GiB"),
    ("ring_cost unknown kind", lambda t: sh.ring_cost("all-to-all", 10, 2), ValueError, r"unknown kind 'all-to-all'"),
    ("ring_cost world_size=0", lambda t: sh.ring_cost("all-reduce", 10, 0), ValueError, r"world_size must be .*got 0"),
    ("expected_bytes FSDP3", lambda t: sh.expected_bytes("FSDP3", 10, 2), ValueError, r"unknown method 'FSDP3'"),
    ("divisible_mlp width=10", lambda t: sh.divisible_mlp(10), ValueError, r"width must be a multiple of 12.*got 10"),
    ("load_sharded missing", lambda t: sh.load_sharded(LIN, torch.optim.SGD(LIN.parameters(), lr=1), t), FileNotFoundError, r"no DCP checkpoint at .*save_sharded"),
    ("bench sharding --world-size 0", lambda t: bench_cli("--world-size", "0"), SystemExit, r"2"),
    ("bench sharding --steps x", lambda t: bench_cli("--steps", "x"), SystemExit, r"2"),
    ("checkpoint_worker action", lambda t: sh.checkpoint_worker(0, 1, str(t), "copy", None, None), ValueError, r"unknown action 'copy'"),
    ("checkpoint_worker steps=-1", lambda t: sh.checkpoint_worker(0, 1, str(t), "save", None, None, -1), ValueError, r"steps must be an integer >= 0, got -1"),
    # issue 23, the last public names of chapter 9
    ("sharding.check_precision a precision name", lambda t: sh.check_precision("bf16", "ZeRO-2"), TypeError, r"mode must be of type MathMode, got str: pass MathMode\(precision, device\), or None"),
    ("sharding.check_sharding_group without a group", lambda t: sh.check_sharding_group("Zero9"), RuntimeError, r"Zero9 needs a process group: call it inside a worker started by companion\.runtime\.launch"),
    ("sharding.default_units not a model", lambda t: sh.default_units([LIN]), TypeError, r"net must be a torch\.nn\.Module \(a model\), got list"),
    ("sharding.full_parameters optimizer and model swapped", lambda t: sh.full_parameters(torch.optim.SGD(LIN.parameters(), lr=1), LIN), TypeError, r"model must be a torch\.nn\.Module \(a model\), got SGD"),
    ("sharding.global_batches n=0", lambda t: sh.global_batches(n=0), ValueError, r"n must be an integer >= 1, got 0: a batch needs samples"),
    ("sharding.global_batches steps=3.5", lambda t: sh.global_batches(steps=3.5), TypeError, r"steps must be an integer >= 1, got 3\.5"),
    ("sharding.one_process unknown optimizer", lambda t: sh.one_process([], "Adagrad"), ValueError, r"unknown optimizer 'Adagrad'; choose one of"),
    ("sharding.measure_state optimizer and model swapped", lambda t: sh.measure_state(torch.optim.SGD(LIN.parameters(), lr=1), LIN), TypeError, r"model must be a torch\.nn\.Module \(a model\), got SGD"),
    ("sharding.plot_memory nothing measured", lambda t: sh.plot_memory({}), ValueError, r"give \{world size: \{method: state_worker's result\}\} for one or more sizes"),
    ("sharding.plot_zero3_timeline no runs", lambda t: sh.plot_zero3_timeline({}), ValueError, r"give at least one run's events, e\.g\. \{'no prefetch': events\}"),
    ("sharding.record_zero3_step without a group", lambda t: sh.record_zero3_step(0, 2, True), RuntimeError, r"no process group: call rank_device\(\) inside a worker started by launch\(\)"),
    ("sharding.save_sharded without a group", lambda t: sh.save_sharded(LIN, torch.optim.SGD(LIN.parameters(), lr=1), t / "ckpt"), RuntimeError, r"save_sharded needs a process group"),
    ("sharding.setup_sharded unknown method", lambda t: sh.setup_sharded(None, None, "ZeRO-4", "x"), ValueError, r"unknown method 'ZeRO-4'; choose one of"),
    ("sharding.load_extra no checkpoint", lambda t: sh.load_extra(t), FileNotFoundError, r"no DCP checkpoint at .*: give the folder that save_sharded wrote"),
    ("sharding.train_sharded without a group", lambda t: sh.train_sharded(None, "ci"), RuntimeError, r"train_sharded needs a process group"),
    ("sharding.Zero3 a model sharded twice", lambda t: in_group(lambda: sharded_twice(sh.Zero3, sh.Zero3)), ValueError, r"Zero3: this model is already sharded by Zero3 \(a cell run twice\?\): build a fresh model and shard that"),
    ("sharding.Zero1 a model that Zero3 shards", lambda t: in_group(lambda: sharded_twice(sh.Zero3, sh.Zero1)), ValueError, r"Zero1: this model is already sharded by Zero3"),
    ("sharding.Zero3 state_dict between steps", lambda t: in_group(lambda: zero3_then(lambda net: net.state_dict())), RuntimeError, r"Zero3: between steps each rank holds only its shard of the parameters .* call optimizer\.full_parameters\(\) on every rank"),
    ("sharding.Zero3 a parameter read between steps", lambda t: in_group(lambda: zero3_then(lambda net: net[0].weight)), sh.FreedParameterRead, r"Zero3Linear\.weight is sharded by ZeRO-3: between steps each rank holds only its shard, so there is no whole value to read here\. Call optimizer\.full_parameters\(\) on every rank"),
    ("sharding.fsdp2 every parameter frozen", lambda t: in_group(lambda: sh.fsdp2(nn.Linear(3, 2).requires_grad_(False), torch.optim.SGD, lr=0.1)), ValueError, r"fsdp2: the model has no trainable parameters: nothing to shard"),
    ("sharding.clip_shards max_norm=0", lambda t: sh.clip_shards([torch.zeros(2)], 0), ValueError, r"max_norm must be a positive, finite number, got 0"),
    ("sharding.clip_grad_norm a model that is an optimizer", lambda t: sh.clip_grad_norm(torch.optim.SGD(LIN.parameters(), lr=1), None, 1.0), TypeError, r"model must be a torch\.nn\.Module"),
    ("sharding.clip_grad_norm max_norm=nan", lambda t: sh.clip_grad_norm(LIN, None, float("nan")), ValueError, r"max_norm must be a positive, finite number, got nan"),
    ("sharding.Zero1 clip_grad_norm_ max_norm=-1", lambda t: in_group(lambda: sh.Zero1(nn.Linear(3, 2), torch.optim.SGD, lr=0.1).clip_grad_norm_(-1)), ValueError, r"max_norm must be a positive, finite number, got -1"),
    ("sharding.Recomputed not a module", lambda t: sh.Recomputed(torch.relu), TypeError, r"block must be a torch\.nn\.Module \(a model\), got builtin_function_or_method"),
    ("sharding.recompute nothing to wrap", lambda t: sh.recompute(nn.Sequential(nn.ReLU())), ValueError, r"recompute: no child of the model holds parameters: nothing to wrap"),
    ("sharding.expanding_mlp width=0", lambda t: sh.expanding_mlp(0), ValueError, r"width must be an integer >= 1, got 0"),
    ("sharding.recompute_cost one round", lambda t: sh.recompute_cost(8, rounds=1), ValueError, r"rounds must be an integer >= 2, got 1: a spread needs two rounds or more"),
    ("sharding.saved_bytes not a model", lambda t: sh.saved_bytes(torch.relu, torch.zeros(1)), TypeError, r"model must be a torch\.nn\.Module"),
    ("sharding.hybrid_groups without a group", lambda t: sh.hybrid_groups(2), RuntimeError, r"hybrid_groups needs a process group: call it inside a worker"),
    ("sharding.hybrid_groups more replicas than ranks", lambda t: in_group(lambda: sh.hybrid_groups(2)), ValueError, r"replicas must be at most 1, got 2: the number of replicas \(nodes\)"),
    ("runtime.save_checkpoint of a ZeRO-3 model", lambda t: in_group(lambda: zero3_then(lambda net: rt.save_checkpoint(net, t / "m.pt"))), RuntimeError, r"Zero3: between steps each rank holds only its shard.*save_sharded\(model, optimizer, path\)"),
    ("sharding.stage_state not a stage", lambda t: sh.stage_state(torch.optim.SGD(LIN.parameters(), lr=1)), TypeError, r"stage must be of type ShardedOptimizer, got SGD: pass a Zero1, Zero2 or Zero3"),
    ("sharding.load_stage_state not a stage", lambda t: sh.load_stage_state(None, str(t)), TypeError, r"stage must be of type ShardedOptimizer, got NoneType"),
    ("sharding.Zero2 a sparse parameter", lambda t: in_group(lambda: sh.Zero2(_sparse_parameter(), torch.optim.SGD, lr=0.1)), ValueError, r"w is a torch\.sparse_coo tensor: the wrappers and stages broadcast, flatten and average dense tensors only; make it dense"),
    ("checkpoint_worker ZeroRedundancyOptimizer", lambda t: sh.checkpoint_worker(0, 1, str(t), "save", None, None, 1, "ZeroRedundancyOptimizer"), ValueError, r"unknown method 'ZeroRedundancyOptimizer'"),
]
# fmt: on


@pytest.mark.ch9
@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(tmp_path, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path)
