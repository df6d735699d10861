"""Bad input gets a clear error that says what to do: one row per (function, bad arguments,
expected error, message pattern). Every row calls a public function (or the command line) in
this process; the process-group-dependent checks run before any collective, so no group is
needed. A reader can scan the table to see what each function refuses and how."""

import argparse
import math

import pytest
import torch
from torch.utils.data import TensorDataset

import companion.collectives as col
import companion.core as core
import companion.dataparallel as dp
import companion.ddp as ddp
import companion.elastic as el
import companion.internals as ic
import companion.runtime as rt
import companion.sharding as sh
import companion.split as split
import companion.study as st
import companion.troubleshoot as ts
import companion_tools.bench as bench
import companion_tools.pictures as pic
from companion.elastic import cli as _elastic_cli  # noqa: F401  (el.cli)

NAN, INF = math.nan, math.inf
# troubleshoot's main without torch's @record, whose fault handler needs a real stderr
TROUBLESHOOT_MAIN = ts.main.__wrapped__
TENSORS = TensorDataset(torch.zeros(4, 1, 28, 28), torch.arange(4))  # a Dataset, not a Data


def _tiny(n: int) -> core.ImageSet:
    return core.ImageSet(torch.zeros(n, 28, 28, dtype=torch.uint8), torch.arange(n) % 10)


TINY = core.Data("tiny", _tiny(12), _tiny(5), tuple("0123456789"))
EMPTY = core.Data("empty", _tiny(0), _tiny(0), tuple("0123456789"))
NO_TEST = core.Data("no-test", _tiny(12), _tiny(0), tuple("0123456789"))
X, Y = torch.zeros(4, 1, 28, 28), torch.arange(4)
CPU = [torch.device("cpu")]
CE = torch.nn.CrossEntropyLoss(reduction="none")  # one loss per sample, as split's steps take it


def net():
    return core.get_model("lenet")


def batches():
    while True:
        yield X, Y


def iters(data=TINY):
    return core.load_iters(data, 4)


def ddp_config(**options):
    return ddp.DDPConfig(profile="ci", **options).resolve(2)


def ddp_cli(*argv):
    """The command line's parse and checks, as main runs them before joining a group."""
    parser = ddp.build_parser()
    try:
        ddp.check_options(parser.parse_args(list(argv)), 2)
    except SystemExit as exit_:
        raise ValueError(f"argparse exited with {exit_.code}") from None


# A table, one row per line: not reformatted.
# fmt: off
BENCH_OPTIONS = [("allreduce", "--world-size"), ("allreduce", "--mb"), ("allreduce", "--repeats"),
                 ("dataparallel", "--batch-sizes"), ("dataparallel", "--steps"),
                 ("dataparallel", "--rounds"), ("dataparallel", "--devices"),
                 ("ddp", "--world-size"), ("ddp", "--global-batch"), ("ddp", "--rounds"),
                 ("ddp", "--steps"), ("launch", "--world-size"), ("launch", "--repeats"),
                 ("loop", "--rounds"), ("split", "--rounds"), ("split", "--steps"),
                 ("split", "--devices"), ("internals", "--world-size"),
                 ("internals", "--global-batch"), ("internals", "--rounds"), ("internals", "--steps"),
                 ("internals", "--caps"), ("compression", "--world-size"),
                 ("compression", "--global-batch"), ("compression", "--rounds"),
                 ("compression", "--steps"), ("fsdp", "--world-size"), ("fsdp", "--rounds"),
                 ("fsdp", "--steps")]
# fmt: on


# A table, one row per line: not reformatted.
# fmt: off
ARGPARSE_REFUSES = [  # (command line, argv) that argparse itself refuses: exit 2 before any work
    ('ddp', ["--profile", "laptop"]),
    ('ddp', ["--lr", "0"]),
    ('ddp', ["--epochs", "0"]),
    ('ddp', ["--per-rank-batch", "0"]),
    ('ddp', ["--timeout", "0"]),
    ('ddp', ["--precision", "fp8"]),
    ('ddp', ["--backend", "mpi"]),
    ('elastic', ["--snapshot", "s.pt", "--epochs", "0"]),
    ('elastic', ["--snapshot", "s.pt", "--snapshot-every", "0"]),
    ('elastic', ["--snapshot", "s.pt", "--profile", "laptop"]),
    ('elastic', ["--snapshot", "s.pt", "--global-batch", "0"]),
    ('elastic', ["--snapshot", "s.pt", "--lr", "0"]),
    ('elastic', ["--snapshot", "s.pt", "--seed", "-1"]),
    ('elastic', ["--snapshot", "s.pt", "--backend", "mpi"]),
    ('elastic', ["--snapshot", "s.pt", "--timeout", "0"]),
]
# fmt: on
CLI_CHECKS = {
    "ddp": lambda *argv: ddp_cli(*argv),
    "elastic": lambda *argv: elastic_cli(*argv),
}  # defined below


def bench_cli(name, option, value):
    """A benchmark's command line with one bad option; argparse exits before any work."""
    import importlib

    try:
        importlib.import_module(f"companion_tools.bench.{name}").main([option, value])
    except SystemExit as exit_:
        raise ValueError(f"argparse exited with {exit_.code}") from None


def bench_module(name):
    import importlib

    return importlib.import_module(f"companion_tools.bench.{name}")


def bench_main(name):
    import contextlib
    import io

    from companion_tools.bench.__main__ import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([name])
    raise ValueError(f"exit {code}: {err.getvalue()}")


def cli(main, *argv):
    """A command line's main with bad options: argparse's exit, as a ValueError carrying stderr."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exit_:
            last = err.getvalue().strip().splitlines()[-1:]  # argparse's "prog: error: ..."
            raise ValueError(f"exit {exit_.code}: {' '.join(last)}") from None
    raise AssertionError(f"{argv} ran without an error")


def elastic_cli(*argv):
    """The elastic command line's parse and checks, as main runs them before joining a group."""
    from companion.commands import ELASTIC_METHODS

    parser = el.build_parser(ELASTIC_METHODS)
    try:
        el.cli._check(parser.parse_args(list(argv)))
    except SystemExit as exit_:
        raise ValueError(f"argparse exited with {exit_.code}") from None


def step(X=X, y=Y, loss=None):
    model = net()
    return core.train_step(
        model, X, y, loss or torch.nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), 0.1)
    )


def accumulate(X=X, y=Y, micro_batches=1):
    model = net()
    return ic.accumulation_step(
        model,
        X,
        y,
        torch.nn.CrossEntropyLoss(),
        torch.optim.SGD(model.parameters(), 0.1),
        micro_batches,
    )


def in_group(call):
    """``call()`` inside a one-process gloo group (an in-memory store), ended afterwards."""
    import os
    from unittest import mock

    import torch.distributed as dist

    with mock.patch.dict(os.environ, GLOO_SOCKET_IFNAME="lo"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            return call()
        finally:
            dist.destroy_process_group()


def _step_without_finish(wrapper):
    """A backward, then the next forward pass, with no finish() between them."""
    model = wrapper(net(), finish_in_backward=False)
    model(X).sum().backward()
    model(X)


def _trio():
    """A model, its optimizer and a scheduler, as a snapshot holds them."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, el.warmup_schedule(optimizer, 0)


def write(tmp, name, data: bytes):
    path = tmp / name
    path.write_bytes(data)
    return path


# (id, call(tmp_path), expected error, message pattern: the argument, the value, the fix)
# A table, one row per line: not reformatted.
# fmt: off
CASES = [
    ("study.per_process not a worker", lambda t: st.per_process("ddp_worker", 5), TypeError, r"worker must be a launch worker \(a function of rank, \.\.\.\), got 'ddp_worker'"),
    ("sharding.load_sharded_snapshot a folder of other things", lambda t: sh.load_sharded_snapshot(t), el.SnapshotError, r"is not a sharded snapshot \(a folder that save_sharded_snapshot wrote\)"),
    ("study.run_method unknown method", lambda t: st.run_method("zero3", None), ValueError, r"unknown method 'zero3'; choose one of"),
    ("check_fp32 bf16", lambda t: core.check_fp32(core.MathMode("bf16", "cpu"), "split.train"), ValueError, r"split\.train computes in fp32 only, got precision=bf16: pass precision='fp32'"),
    ("gpu_indices not a device", lambda t: core.gpu_indices(["x"]), ValueError, r"'x' is not a device: give 'cpu', 'cuda:0'"),
    ("core.check_torch 2.10", lambda t: core.check_torch("2.10.1+cu128"), ImportError, r"companion needs torch>=2\.11, but torch 2\.10\.1\+cu128 is installed: upgrade it with pip install"),
    ("core.check_torch not a version", lambda t: core.check_torch("nightly"), ValueError, r"not a torch version: 'nightly'"),
    ("core.get_profile empty name", lambda t: core.get_profile(""), ValueError, r"profile name '' is empty: pass one of ci, cpu, gpu, rehearsal, or None"),
    ("core.get_profile gpus=-1", lambda t: core.get_profile("gpu", gpus=-1), ValueError, r"gpus must be a count of GPUs \(an integer >= 0\), got -1: e.g. 1"),
    ("core.gpu_device_counts gpus=1.5", lambda t: core.gpu_device_counts(1.5), ValueError, r"gpus must be a count of GPUs \(an integer >= 0\), got 1.5"),
    ("core.is_virtual n=0", lambda t: core.is_virtual(0, "cpu"), ValueError, r"need a device count >= 1, got 0"),
    ("core.is_virtual not a device", lambda t: core.is_virtual(2, "gpu0"), ValueError, r"'gpu0' is not a device: give 'cpu', 'cuda:0'"),
    ("core.linear_lr world_size=0", lambda t: core.linear_lr(0.1, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("core.lr_schedule unknown rule", lambda t: core.lr_schedule(0.1, 2, "cubic", 3), ValueError, r"unknown rule 'cubic'; choose one of \['none', 'linear', 'warmup'\]"),
    ("core.scaled_lr unknown rule", lambda t: core.scaled_lr(0.1, 2, "cubic"), ValueError, r"unknown rule 'cubic'; choose one of"),
    ("ddp.linear_lr world_size=0", lambda t: ddp.linear_lr(0.1, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("core.warmup_lr step=-1", lambda t: core.warmup_lr(-1, 0.1, 0.2, 3), ValueError, r"step must be an integer >= 0, got -1"),
    ("scratch_dir prefix with a slash", lambda t: core.scratch_dir("a/b"), ValueError, r"prefix must be a non-empty name without '/'"),
    # core: devices, profiles, data, loaders, batches, models
    ("try_devices n=0", lambda t: core.try_devices(0), ValueError, r"need a device count >= 1, got 0; ask for at least one device"),
    ("try_devices n=1.5", lambda t: core.try_devices(1.5), ValueError, r"need a device count >= 1, got 1\.5"),
    ("try_devices n=True", lambda t: core.try_devices(True), ValueError, r"need a device count >= 1, got True"),
    ("get_profile unknown", lambda t: core.get_profile("laptop"), ValueError, r"unknown profile 'laptop'; valid profiles are"),
    ("get_profile int", lambda t: core.get_profile(3), ValueError, r"unknown profile 3"),
    ("load_data unknown", lambda t: core.load_data("imagenet", verbose=False), ValueError, r"imagenet.*choose|unknown"),
    ("load_mnist_sample test_fraction=0", lambda t: core.load_mnist_sample(0), ValueError, r"test_fraction must be between 0 and 1, got 0"),
    ("load_mnist_sample test_fraction=nan", lambda t: core.load_mnist_sample(NAN), ValueError, r"test_fraction must be between 0 and 1, got nan"),
    ("data_loader batch_size=0", lambda t: core.data_loader(TINY.train, 0), ValueError, r"batch_size must be a positive integer, got 0"),
    ("data_loader batch_size=2.5", lambda t: core.data_loader(TINY.train, 2.5), ValueError, r"batch_size must be a positive integer, got 2\.5"),
    ("data_loader empty", lambda t: core.data_loader(EMPTY.train, 4), ValueError, r"dataset is empty \(0 samples\)"),
    ("DeviceLoader batch_size=True", lambda t: core.DeviceLoader(TINY.train, True), ValueError, r"batch_size must be a positive integer, got True"),
    ("DeviceLoader empty", lambda t: core.DeviceLoader(EMPTY.train, 4), ValueError, r"dataset is empty \(0 samples\)"),
    ("load_iters batch_size=-1", lambda t: core.load_iters(TINY, -1), ValueError, r"batch_size must be a positive integer, got -1"),
    ("check_batch_size nan", lambda t: core.check_batch_size(NAN), ValueError, r"batch_size must be a positive integer, got nan"),
    ("check_batch_fits a batch larger than the share", lambda t: core.check_batch_fits(40, 32, 2), ValueError, r"per_rank_batch 40 is larger than each rank's share of the training set \(32 samples over 2 rank\(s\)\): pass at most 32 per rank, a global batch of at most 64"),
    ("rank_batch_size world_size=0", lambda t: core.rank_batch_size(48, 0), ValueError, r"world_size must be a positive integer, got 0"),
    ("rank_batch_size world_size=2.0", lambda t: core.rank_batch_size(48, 2.0), ValueError, r"world_size must be a positive integer, got 2\.0"),
    ("rank_batch_size uneven", lambda t: core.rank_batch_size(50, 4), ValueError, r"choose a multiple of 4, e\.g\. 48"),
    ("get_model unknown", lambda t: core.get_model("vgg"), ValueError, r"unknown model 'vgg'; choose one of lenet"),
    ("get_model None", lambda t: core.get_model(None), ValueError, r"unknown model None; choose one of lenet"),
    ("get_model num_classes=0", lambda t: core.get_model("lenet", 0), ValueError, r"num_classes must be an integer >= 1, got 0"),
    ("lenet num_classes=1.5", lambda t: core.lenet(1.5), TypeError, r"num_classes must be an integer >= 1, got 1\.5"),
    ("resnet18 in_channels=0", lambda t: core.resnet18(10, 0), ValueError, r"in_channels must be an integer >= 1, got 0"),
    ("set_seed 1.5", lambda t: core.set_seed(1.5), TypeError, r"seed must be an integer >= 0, got 1\.5"),
    ("set_seed -1", lambda t: core.set_seed(-1), ValueError, r"seed must be an integer >= 0, got -1"),
    # core: one-device training, results, files, listings
    ("evaluate_accuracy empty", lambda t: core.evaluate_accuracy(net(), []), ValueError, r"empty iterator"),
    ("warm_up lr=-1", lambda t: core.warm_up(net(), X, Y, -1), ValueError, r"lr must be a positive, finite number, got -1"),
    ("warm_up steps=-1", lambda t: core.warm_up(net(), X, Y, 0.1, -1), ValueError, r"steps must be an integer >= 0, got -1"),
    ("core.shell_lines width=10", lambda t: core.shell_lines("echo hi", 10), ValueError, r"width must be an integer >= 20, got 10: the characters a line may hold"),
    ("core.fit epochs=0", lambda t: core.fit(net(), *iters(), torch.optim.SGD(net().parameters(), 0.1), 0, core.record_maker("1 device", 1, profile="ci", model="lenet", dataset="", precision="fp32")), ValueError, r"epochs must be an integer >= 1, got 0: the number of passes over train_iter"),
    ("core.fit epochs='2'", lambda t: core.fit(net(), *iters(), torch.optim.SGD(net().parameters(), 0.1), "2", core.record_maker("1 device", 1, profile="ci", model="lenet", dataset="", precision="fp32")), TypeError, r"epochs must be an integer >= 1, got '2' of type str: the number of passes over train_iter"),
    ("core.train lr=-1", lambda t: core.train(net(), *iters(), epochs=1, lr=-1, profile="ci"), ValueError, r"lr must be a positive, finite number, got -1: pass a learning rate such as 0\.1"),
    ("core.train lr=nan", lambda t: core.train(net(), *iters(), epochs=1, lr=NAN, profile="ci"), ValueError, r"lr must be a positive, finite number, got nan"),
    ("core.train lr=inf", lambda t: core.train(net(), *iters(), epochs=1, lr=INF, profile="ci"), ValueError, r"lr must be a positive, finite number, got inf"),
    ("core.train lr='0.1'", lambda t: core.train(net(), *iters(), epochs=1, lr="0.1", profile="ci"), TypeError, r"lr must be a positive, finite number, got '0\.1' of type str"),
    ("core.train epochs=0", lambda t: core.train(net(), *iters(), epochs=0, lr=0.1, profile="ci"), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("core.train epochs=1.5", lambda t: core.train(net(), *iters(), epochs=1.5, lr=0.1, profile="ci"), TypeError, r"epochs must be an integer >= 1, got 1\.5"),
    ("core.train epochs=True", lambda t: core.train(net(), *iters(), epochs=True, lr=0.1, profile="ci"), TypeError, r"epochs must be an integer >= 1, got True"),
    ("core.train empty test_iter", lambda t: core.train(net(), iters()[0], [], epochs=1, lr=0.1, profile="ci"), ValueError, r"test_iter is empty \(0 minibatches\)"),
    ("load_iters empty test set", lambda t: core.load_iters(NO_TEST, 4), ValueError, r"dataset is empty \(0 samples\)"),
    ("sgd_steps lr=0", lambda t: core.sgd_steps(net(), batches(), 0, 1), ValueError, r"lr must be a positive, finite number, got 0"),
    ("sgd_steps steps=-1", lambda t: core.sgd_steps(net(), batches(), 0.1, -1), ValueError, r"steps must be an integer >= 0, got -1"),
    ("sgd_steps steps=2.5", lambda t: core.sgd_steps(net(), batches(), 0.1, 2.5), TypeError, r"steps must be an integer >= 0, got 2\.5"),
    ("summarize no records", lambda t: core.summarize([]), ValueError, r"summarize needs at least one record"),
    ("plot_scaling no records", lambda t: core.plot_scaling([]), ValueError, r"plot_scaling needs at least one record"),
    ("load_records missing", lambda t: core.load_records(t / "none.json"), FileNotFoundError, r"none\.json"),
    ("load_records garbage", lambda t: core.load_records(write(t, "r.json", b"\x00garbage")), ValueError, r"r\.json.*not a records file.*save_records"),
    ("atomic_write under a file", lambda t: core.atomic_write(write(t, "f", b"") / "x.pt", lambda f: None), NotADirectoryError, r"is a file"),
    ("atomic_write to a directory", lambda t: core.atomic_write(t, lambda f: None), IsADirectoryError, r"directory"),
    ("show a number", lambda t: core.show(42), TypeError, r"show"),
    ("as_devices no devices", lambda t: core.as_devices([]), ValueError, r"need at least one device, got \[\]: pass a list"),
    ("as_devices unknown device", lambda t: core.as_devices(["tpu"]), ValueError, r"'tpu' is not a device: give 'cpu', 'cuda:0'"),
    ("ImageSet images and labels differ", lambda t: core.ImageSet(torch.zeros(3, 28, 28, dtype=torch.uint8), torch.arange(2)), ValueError, r"3 images but 2 labels"),
    ("ImageSet float images", lambda t: core.ImageSet(torch.zeros(3, 28, 28), torch.arange(3)).tensors(), ValueError, r"images must be uint8"),
    ("describe_setup unknown profile", lambda t: core.describe_setup("laptop"), ValueError, r"unknown profile 'laptop'"),
    ("accuracy rows and labels differ", lambda t: core.accuracy(torch.zeros(3, 10), Y), ValueError, r"3 rows of logits for 4 labels"),
    ("count_parameters not a model", lambda t: core.count_parameters(3), TypeError, r"net must be a torch\.nn\.Module \(a model\), got int"),
    ("save_records to a directory", lambda t: core.save_records([], t), IsADirectoryError, r"give a file name"),
    # runtime
    ("register_wrapper not a class", lambda t: rt.register_wrapper(3), TypeError, r"cls must be a subclass of nn\.Module, got 3"),
    ("backend_for 0", lambda t: rt.backend_for(0), ValueError, r"the number of processes must be an integer >= 1, got 0"),
    ("threads_per_worker 0", lambda t: rt.threads_per_worker(0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("launch world_size=0", lambda t: rt.launch(col.whoami, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("launch world_size=2.0", lambda t: rt.launch(col.whoami, 2.0), ValueError, r"world_size must be an integer >= 1, got 2\.0"),
    ("launch world_size=True", lambda t: rt.launch(col.whoami, True), ValueError, r"world_size must be an integer >= 1, got True"),
    ("launch timeout=0", lambda t: rt.launch(col.whoami, 1, timeout=0), ValueError, r"timeout"),
    ("launch timeout=nan", lambda t: rt.launch(col.whoami, 1, timeout=NAN), ValueError, r"timeout"),
    ("launch backend=mpi", lambda t: rt.launch(col.whoami, 1, backend="mpi"), ValueError, r"unknown backend 'mpi'; use 'gloo' or 'nccl'"),
    ("launch a lambda", lambda t: rt.launch(lambda r, w: r, 1), TypeError, r"lambda|importable|module"),
    ("launch not a function", lambda t: rt.launch(3, 1), TypeError, r"launch\(\) needs a function, got int"),
    ("torchrun_command nproc=0", lambda t: rt.torchrun_command(0), ValueError, r"nproc must be an integer >= 1, got 0"),
    ("run_torchrun nproc=1.5", lambda t: rt.run_torchrun(1.5), TypeError, r"nproc must be an integer >= 1, got 1\.5"),
    ("run_torchrun timeout=-1", lambda t: rt.run_torchrun(1, timeout=-1), ValueError, r"timeout must be a positive, finite number, got -1"),
    ("leave_now code=-1", lambda t: rt.leave_now(-1), ValueError, r"code must be an integer >= 0, got -1"),
    ("save_checkpoint to a directory", lambda t: rt.save_checkpoint(net(), t), IsADirectoryError, r"directory"),
    ("save_checkpoint under a file", lambda t: rt.save_checkpoint(net(), write(t, "f", b"") / "m.pt"), NotADirectoryError, r"is a file"),
    ("load_checkpoint missing", lambda t: rt.load_checkpoint(net(), t / "none.pt"), FileNotFoundError, r"none\.pt"),
    ("load_checkpoint empty file", lambda t: rt.load_checkpoint(net(), write(t, "e.pt", b"")), rt.CheckpointError, r"e\.pt"),
    ("load_checkpoint random bytes", lambda t: rt.load_checkpoint(net(), write(t, "r.pt", bytes(range(256)) * 8)), rt.CheckpointError, r"r\.pt"),
    ("open_writer log_dir is a file", lambda t: rt.open_writer(write(t, "f", b""), 0), NotADirectoryError, r"log"),
    ("open_writer rank=-1", lambda t: rt.open_writer(t / "logs", -1), ValueError, r"rank must be an integer >= 0, got -1"),
    ("read_scalars missing", lambda t: rt.read_scalars(t / "none"), FileNotFoundError, r"none"),
    ("rank_device backend=mpi", lambda t: rt.rank_device(0, "mpi"), ValueError, r"unknown backend 'mpi'; choose one of \['gloo', 'nccl'\]"),
    ("init_from_env backend=mpi", lambda t: rt.init_from_env("mpi"), ValueError, r"unknown backend 'mpi'; choose one of \['auto', 'gloo', 'nccl'\]"),
    # split (chapter 2)
    ("shard_sizes n_shards=0", lambda t: split.shard_sizes(10, 0), ValueError, r"need at least one device, got 0"),
    ("shard_sizes n_shards=2.0", lambda t: split.shard_sizes(10, 2.0), TypeError, r"n_shards must be an integer >= 0, got 2\.0"),
    ("shard_sizes too small a batch", lambda t: split.shard_sizes(3, 4), ValueError, r"use a batch of at least 4 samples"),
    ("split_batch no devices", lambda t: split.split_batch(X, Y, []), ValueError, r"device"),
    ("copy_replicas no devices", lambda t: split.copy_replicas(net(), []), ValueError, r"at least one device"),
    ("sgd lr=nan", lambda t: split.sgd(net().parameters(), NAN), ValueError, r"lr must be a positive, finite number, got nan"),
    ("sgd_foreach lr=-1", lambda t: split.sgd_foreach(net().parameters(), -1), ValueError, r"lr must be a positive, finite number, got -1"),
    ("train_batch lr=0", lambda t: split.train_batch(X, Y, [net()], CPU, 0), ValueError, r"lr must be a positive, finite number, got 0"),
    ("split.train epochs=0", lambda t: split.train(net(), *iters(), CPU, epochs=0, lr=0.1), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("split.train lr=inf", lambda t: split.train(net(), *iters(), CPU, epochs=1, lr=INF), ValueError, r"lr must be a positive, finite number, got inf"),
    # collectives (chapter 3)
    ("chunk_bounds world_size=0", lambda t: col.chunk_bounds(10, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("chunk_bounds numel=-1", lambda t: col.chunk_bounds(-1, 2), ValueError, r"numel must be an integer >= 0, got -1"),
    ("cost_terms world_size=0", lambda t: col.cost_terms("ring", 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("cost_terms world_size=2.5", lambda t: col.cost_terms("ring", 2.5), TypeError, r"world_size must be an integer >= 1, got 2\.5"),
    ("cost_terms unknown", lambda t: col.cost_terms("tree", 2), ValueError, r"no cost model for 'tree'; choose from"),
    ("predict nbytes=-1", lambda t: col.predict("ring", 2, -1, 1e-5, 1e-9), ValueError, r"nbytes must be .*>= 0, got -1"),
    ("predict alpha=nan", lambda t: col.predict("ring", 2, 8, NAN, 1e-9), ValueError, r"alpha must be .*got nan"),
    ("bus_bandwidth seconds=0", lambda t: col.bus_bandwidth(8, 0, 2), ValueError, r"seconds must be a positive, finite number, got 0"),
    ("bus_bandwidth world_size=0", lambda t: col.bus_bandwidth(8, 1.0, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("fit_alpha_beta one point", lambda t: col.fit_alpha_beta([8], [1.0]), ValueError, r"need at least two \(nbytes, seconds\) pairs"),
    ("fit_alpha_beta zero time", lambda t: col.fit_alpha_beta([8, 16], [0.0, 1.0]), ValueError, r"measured times must be positive"),
    ("fit_link nothing to fit", lambda t: col.fit_link([]), ValueError, r"need at least two"),
    ("measure_allreduce world_sizes=[0]", lambda t: col.measure_allreduce([0], [4]), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("measure_allreduce numels=[-1]", lambda t: col.measure_allreduce([1], [-1]), ValueError, r"numels must be integers >= 0, got \[-1\]"),
    ("measure_allreduce unknown algorithm", lambda t: col.measure_allreduce([1], [4], ["tree"]), ValueError, r"unknown algorithm\(s\) \['tree'\]; choose from"),
    ("measure_allreduce repeats=0", lambda t: col.measure_allreduce([1], [4], repeats=0), ValueError, r"repeats must be an integer >= 1, got 0"),
    ("plot_bandwidth no measurements", lambda t: col.plot_bandwidth([]), ValueError, r"2 or more processes"),
    ("DataPartitioner no sizes", lambda t: col.DataPartitioner(TINY.train, []), ValueError, r"sizes \[\] must be non-negative"),
    ("DataPartitioner sizes=[True]", lambda t: col.DataPartitioner(TINY.train, [True]), TypeError, r"sizes are sample counts"),
    ("DataPartitioner.even world_size=2.0", lambda t: col.DataPartitioner.even(TINY.train, 2.0), TypeError, r"world_size must be an integer >= 1, got 2\.0"),
    ("DataPartitioner.even empty", lambda t: col.DataPartitioner.even(EMPTY.train, 2), ValueError, r"dataset is empty"),
    ("average_gradients unknown", lambda t: col.average_gradients(net(), "tree"), ValueError, r"unknown all-reduce 'tree'"),
    ("average_gradients n_local=0", lambda t: col.average_gradients(net(), "ring", 0), ValueError, r"n_local must be a positive integer, got 0"),
    ("train_worker lr=-1", lambda t: col.train_worker(0, 1, TINY, "ci", lr=-1), ValueError, r"lr must be a positive, finite number, got -1"),
    ("train_worker epochs=1.5", lambda t: col.train_worker(0, 1, TINY, "ci", epochs=1.5), TypeError, r"epochs must be an integer >= 1, got 1\.5"),
    ("train_worker unknown model", lambda t: col.train_worker(0, 1, TINY, "ci", model="vgg"), ValueError, r"unknown model 'vgg'"),
    ("train_worker unknown allreduce", lambda t: col.train_worker(0, 1, TINY, "ci", allreduce="tree"), ValueError, r"unknown all-reduce 'tree'"),
    ("train_worker max_steps=0", lambda t: col.train_worker(0, 1, TINY, "ci", max_steps=0), ValueError, r"max_steps must be >= 1"),
    ("train_worker a local batch larger than the shard", lambda t: in_group(lambda: col.train_worker(0, 1, TINY, "ci", global_batch=16)), ValueError, r"global_batch / world_size 16 is larger than each rank's share of the training set \(12 samples over 1 rank\(s\)\): pass at most 12 per rank, a global batch of at most 12, or use more data"),
    ("train_reference steps=-1", lambda t: col.train_reference(1, TINY, "ci", global_batch=4, lr=0.1, steps=-1), ValueError, r"steps must be an integer >= 0, got -1"),
    ("train_reference lr=0", lambda t: col.train_reference(1, TINY, "ci", global_batch=4, lr=0, steps=1), ValueError, r"lr must be a positive, finite number, got 0"),
    ("uneven_batch size 0", lambda t: col.uneven_batch([2, 0]), ValueError, r"sizes\[1\] must be a positive integer, got 0"),
    ("global_gradient no sizes", lambda t: col.global_gradient([]), ValueError, r"sizes must name at least one rank.s sample count, got \[\]"),
    # dataparallel (chapter 4)
    ("chunk_sizes n_devices=0", lambda t: dp.chunk_sizes(10, 0), ValueError, r"n_devices must be an integer >= 1, got 0: need at least one device"),
    ("chunk_sizes batch_size=0", lambda t: dp.chunk_sizes(0, 2), ValueError, r"cannot scatter a batch of 0 samples: pass a non-empty batch"),
    ("chunk_sizes batch_size=2.5", lambda t: dp.chunk_sizes(2.5, 2), TypeError, r"batch_size must be an integer >= 0, got 2\.5"),
    ("global_mean one size short", lambda t: dp.global_mean(torch.ones(2), [3]), ValueError, r"need one mean per replica"),
    ("global_mean zero samples", lambda t: dp.global_mean(torch.ones(2), [0, 0]), ValueError, r"sizes must add up to at least one sample, got \[0, 0\]"),
    ("DataParallelByHand no devices", lambda t: dp.DataParallelByHand(net(), []), ValueError, r"device"),
    ("scatter no devices", lambda t: dp.scatter((X,), []), ValueError, r"need at least one device"),
    ("parallel_apply one input too many", lambda t: dp.parallel_apply([net()], [(X,), (X,)], ["cpu"]), ValueError, r"pass one input and one device per replica"),
    ("visible_devices_in_subprocess timeout=0", lambda t: dp.visible_devices_in_subprocess("0", timeout=0), ValueError, r"timeout must be a positive, finite number, got 0"),
    ("dataparallel.train epochs=0", lambda t: dp.train(net(), *iters(), CPU, epochs=0, lr=0.1), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("dataparallel.train lr=-1", lambda t: dp.train(net(), *iters(), CPU, epochs=1, lr=-1), ValueError, r"lr must be a positive, finite number, got -1"),
    # ddp (chapter 5)
    ("linear_lr lr=-1", lambda t: ddp.linear_lr(-1, 2), ValueError, r"lr must be a positive, finite number, got -1"),
    ("linear_lr lr=nan", lambda t: ddp.linear_lr(NAN, 2), ValueError, r"lr must be a positive, finite number, got nan"),
    ("linear_lr world_size=2.5", lambda t: ddp.linear_lr(0.1, 2.5), TypeError, r"world_size must be an integer >= 1, got 2\.5"),
    ("DDPConfig epochs=0", lambda t: ddp_config(epochs=0), ValueError, r"epochs must be a positive integer, got 0"),
    ("DDPConfig lr=nan", lambda t: ddp_config(lr=NAN), ValueError, r"lr must be a positive, finite number, got nan"),
    ("DDPConfig lr=True", lambda t: ddp_config(lr=True), TypeError, r"lr must be a positive, finite number, got True"),
    ("DDPConfig model unknown", lambda t: ddp_config(model="vgg"), ValueError, r"unknown model 'vgg'"),
    ("DDPConfig profile unknown", lambda t: ddp.DDPConfig(profile="laptop").resolve(2), ValueError, r"unknown profile 'laptop'"),
    ("DDPConfig both batches", lambda t: ddp_config(global_batch=8, per_rank_batch=4), ValueError, r"give global_batch or per_rank_batch, not both"),
    ("DDPConfig uneven global batch", lambda t: ddp_config(global_batch=7), ValueError, r"choose a multiple of 2"),
    ("DDPConfig seed=1.5", lambda t: ddp_config(seed=1.5), TypeError, r"seed must be an integer >= 0, got 1\.5"),
    ("DDPConfig world_size=0", lambda t: ddp.DDPConfig(profile="ci").resolve(0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("DDPConfig checks='yes'", lambda t: ddp_config(checks="yes"), TypeError, r"checks must be True or False, got 'yes'"),
    ("sampler_indices world_size=0", lambda t: ddp.sampler_indices(range(10), 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("sampler_indices epoch=-1", lambda t: ddp.sampler_indices(range(10), 2, -1), ValueError, r"epoch must be an integer >= 0, got -1"),
    ("eval_indices rank out of range", lambda t: ddp.eval_indices(10, 2, 2), ValueError, r"rank must be in 0\.\.1, got 2"),
    ("eval_indices world_size=0", lambda t: ddp.eval_indices(10, 0, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("SampledLoader batch_size=0", lambda t: ddp.SampledLoader(TINY.train, range(12), 0), ValueError, r"batch_size must be a positive integer, got 0"),
    ("SampledLoader empty", lambda t: ddp.SampledLoader(EMPTY.train, range(0), 4), ValueError, r"dataset is empty"),
    ("count_correct batch_size=0", lambda t: ddp.count_correct(net(), X, Y, 0), ValueError, r"batch_size must be a positive integer, got 0"),
    ("evaluate_distributed empty test set", lambda t: ddp.evaluate_distributed(net(), EMPTY.test), ValueError, r"dataset is empty \(0 samples\).*test set"),
    ("train_reference_ddp steps=-1", lambda t: ddp.train_reference_ddp(1, TINY, "ci", global_batch=4, lr=0.1, steps=-1), ValueError, r"steps must be an integer >= 0, got -1"),
    ("train_ddp empty training set", lambda t: ddp.train_ddp(EMPTY, "ci"), ValueError, r"data\.train is empty"),
    ("fingerprint not a model", lambda t: ddp.fingerprint(3), TypeError, r"net must be a torch\.nn\.Module"),
    ("track_buffers not a model", lambda t: ddp.track_buffers("net"), TypeError, r"net must be a torch\.nn\.Module"),
    ("check_replicas_in_sync no ranks", lambda t: ddp.check_replicas_in_sync([]), ValueError, r"fingerprints is empty: give one per rank"),
    ("check_disjoint_shards no ranks", lambda t: ddp.check_disjoint_shards([], 10), ValueError, r"indices_by_rank is empty"),
    ("ddp.diagnose no traces", lambda t: ddp.diagnose([], 10), ValueError, r"traces is empty: give one RankTrace per rank"),
    ("check_logits not a tensor", lambda t: ddp.check_logits([0.5, 0.5]), TypeError, r"outputs must be a tensor"),
    ("train_with_mistake unknown", lambda t: ddp.train_with_mistake(0, 1, TINY, "typo"), ValueError, r"unknown mistake 'typo'; choose from"),
    ("unused_parameters mismatched batch", lambda t: ddp.unused_parameters(net(), X, Y[:2]), ValueError, r"X and y must hold the same number of samples"),
    ("ddp cli --epochs 1.5", lambda t: ddp_cli("--epochs", "1.5"), ValueError, r"argparse exited with 2"),
    ("ddp cli --seed x", lambda t: ddp_cli("--seed", "x"), ValueError, r"argparse exited with 2"),
    ("ddp cli --seed -1", lambda t: ddp_cli("--seed", "-1"), ValueError, r"argparse exited with 2"),
    ("ddp cli --global-batch 0", lambda t: ddp_cli("--global-batch", "0"), ValueError, r"argparse exited with 2"),
    ("ddp cli --timeout nan", lambda t: ddp_cli("--timeout", "nan"), ValueError, r"argparse exited with 2"),
    ("ddp cli --global-batch 7", lambda t: ddp_cli("--global-batch", "7"), ValueError, r"choose a multiple of 2"),
    ("ddp cli --model vgg", lambda t: ddp_cli("--model", "vgg"), ValueError, r"unknown model 'vgg'"),
    ("ddp cli --per-rank-batch -4", lambda t: ddp_cli("--per-rank-batch", "-4"), ValueError, r"argparse exited with 2"),
    ("ddp cli --lr 1e400", lambda t: ddp_cli("--lr", "1e400"), ValueError, r"argparse exited with 2"),
    ("ddp cli --checkpoint under a file", lambda t: ddp_cli("--checkpoint", str(write(t, "f", b"") / "m.pt")), ValueError, r"--checkpoint .*f is a file, not a directory"),
    ("ddp cli --log-dir under a file", lambda t: ddp_cli("--log-dir", str(write(t, "f", b"") / "logs")), ValueError, r"--log-dir .*f is a file, not a directory"),
    # internals (chapter 6)
    ("assign_buckets cap=0", lambda t: ic.assign_buckets([X], 0), ValueError, r"bucket_cap_mb must be a positive, finite number, got 0.*MiB"),
    ("assign_buckets cap=nan", lambda t: ic.assign_buckets([X], NAN), ValueError, r"bucket_cap_mb must be a positive, finite number, got nan"),
    ("NaiveDDP without a process group", lambda t: ic.NaiveDDP(net()), RuntimeError, r"NaiveDDP needs a process group.*launch"),
    ("BucketedDDP not a model", lambda t: ic.BucketedDDP("net"), TypeError, r"module must be a torch\.nn\.Module"),
    ("internals.wrap unknown variant", lambda t: ic.wrap(net(), "apex DDP"), ValueError, r"unknown variant '.*'; choose one of"),
    ("accumulation_step micro_batches=0", lambda t: ic.accumulation_step(net(), X, Y, torch.nn.CrossEntropyLoss(), torch.optim.SGD(net().parameters(), 0.1), 0), ValueError, r"micro_batches must be an integer >= 1, got 0"),
    ("train_internals unknown variant", lambda t: ic.train_internals(TINY, "ci", "fastest"), ValueError, r"unknown variant '.*'; choose one of"),
    ("train_internals empty training set", lambda t: ic.train_internals(EMPTY, "ci"), ValueError, r"data\.train is empty"),
    ("mlp depth=0", lambda t: ic.mlp(depth=0), ValueError, r"depth must be an integer >= 1, got 0"),
    ("get_bench_model unknown", lambda t: ic.get_bench_model("vgg"), ValueError, r"unknown model 'vgg'; choose mlp or one of"),
    ("predict_step backward_s=0", lambda t: ic.predict_step([4], 0, 1e-5, 1e-9, 2), ValueError, r"backward_s must be a positive, finite number.*measured"),
    ("predict_step no bytes", lambda t: ic.predict_step([], 0.1, 1e-5, 1e-9, 2), ValueError, r"the buckets hold no bytes"),
    ("best_bucket_cap no caps", lambda t: ic.best_bucket_cap(net(), [], 0.1, 1e-5, 1e-9, 2), ValueError, r"give at least one bucket cap"),
    ("internals.record_step torch DDP", lambda t: ic.record_step(0, 1, "torch DDP"), ValueError, r"unknown variant '.*'; choose one of"),
    ("overlap without backward", lambda t: ic.overlap([("bucket 0", 0.0, 1.0)]), ValueError, r"no 'backward' event"),
    ("plot_timeline nothing", lambda t: ic.plot_timeline({}), ValueError, r"give at least one variant's events"),
    # bench: the functions and every numeric option of the benchmarks' command lines
    *[(f"bench {name} {option} {value}", lambda t, n=name, o=option, v=value: bench_cli(n, o, v),
       ValueError, r"argparse exited with 2")
      for name, option in BENCH_OPTIONS for value in ("0", "-1", "nan")],
    ("bench unknown name", lambda t: bench_main("fastest"), ValueError, r"unknown benchmark 'fastest'; available: "),
    ("time_median repeats=0", lambda t: bench.time_median(lambda: None, repeats=0), ValueError, r"repeats must be an integer >= 1, got 0"),
    ("time_median warmup=-1", lambda t: bench.time_median(lambda: None, warmup=-1), ValueError, r"warmup must be an integer >= 0, got -1"),
    # study: runs, plans, files, projections, the command line
    ("study.RunSpec batch 63 over 2", lambda t: st.RunSpec(TINY, "lenet", 2, 63, 0.1, 1), ValueError, r"choose a multiple of 2"),
    ("study.RunSpec lr_rule sqrt", lambda t: st.RunSpec(TINY, "lenet", 1, 4, 0.1, 1, lr_rule="sqrt"), ValueError, r"unknown lr_rule 'sqrt'"),
    ("study.plan strong scaling with lr rule", lambda t: st.plan(["split"], [1], [0], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1, lr_rule="linear"), ValueError, r"strong scaling keeps the global batch"),
    ("study.plan unknown method", lambda t: st.plan(["nope"], [1], [0], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1), ValueError, r"unknown method 'nope'"),
    ("study.plan no seeds", lambda t: st.plan(["split"], [1], [], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1), ValueError, r"at least one method, one device count and one seed"),
    ("study.run_method warm-up without a schedule", lambda t: st.run_method("ddp", st.RunSpec(TINY, "lenet", 2, 4, 0.2, 1, base_lr=0.1, lr_rule="warmup")), ValueError, r"no per-step learning-rate schedule"),
    ("study.load_study not a study", lambda t: st.load_study(write(t, "x.json", b'{"rows": []}')), ValueError, r"not a study file"),
    ("study.subset too many samples", lambda t: st.subset(TINY, 100, 1), ValueError, r"asked for 100 samples"),
    ("study.project compute 0", lambda t: st.project([2], 0.0, 1e6, 1e-5, 1e-9), ValueError, r"compute must be a positive"),
    ("study.measure world_size 1", lambda t: st.measure(1, "lenet", [1]), ValueError, r"an all-reduce needs two ranks"),
    ("study.per_doubling mismatched", lambda t: st.per_doubling([8], [1.0, 2.0]), ValueError, r"give matching devices"),
    ("study.warmup_lr step -1", lambda t: st.warmup_lr(-1, 0.1, 0.2, 4), ValueError, r"step must be an integer >= 0"),
    ("study.cli --methods nope", lambda t: st.parse_args(["--methods", "nope"]), SystemExit, r"2"),
    ("ElasticOptions snapshot_every=0", lambda t: el.ElasticOptions("s.pt", snapshot_every=0).check(), ValueError, r"snapshot_every must be an integer >= 1, got 0"),
    ("ElasticOptions momentum=1", lambda t: el.ElasticOptions("s.pt", momentum=1.0).check(), ValueError, r"momentum must be in \[0, 1\), got 1.0"),
    ("load_snapshot of junk", lambda t: el.load_snapshot(write(t, "s.pt", b"junk")), el.SnapshotError, r"not a readable snapshot .*delete it to start afresh"),
    ("ResumableSampler start past the end", lambda t: el.ResumableSampler(range(10), 2, 0).set_epoch(0, 11), ValueError, r"start 11 is past the end of the epoch \(10 positions\)"),
    ("global_batches batch not a multiple", lambda t: el.global_batches(range(10), 3, 16, 0), ValueError, r"global batch 16 is not a multiple of 3 ranks"),
    ("agent_command nproc=0", lambda t: el.agent_command("2", 0, "h:1", "job"), ValueError, r"nproc must be an integer >= 1, got 0"),
    ("run_agents timeout=0", lambda t: el.run_agents([], timeout=0), ValueError, r"timeout must be"),
    # issue 23: wrong results in silence, now refused
    ("allreduce_ring_pipelined segment=0", lambda t: col.allreduce_ring_pipelined(torch.ones(4), 0), ValueError, r"segment must be an integer >= 1, got 0: give a segment length in elements"),
    ("allreduce_ring_pipelined segment=-1", lambda t: col.allreduce_ring_pipelined(torch.ones(4), -1), ValueError, r"segment must be an integer >= 1, got -1"),
    ("allreduce_ring_pipelined segment=2.0", lambda t: col.allreduce_ring_pipelined(torch.ones(4), 2.0), TypeError, r"segment must be an integer >= 1, got 2\.0"),
    ("allreduce_ring not a tensor", lambda t: col.allreduce_ring([1.0, 2.0]), TypeError, r"tensor must be a torch\.Tensor, got list"),
    ("allreduce_naive not a tensor", lambda t: col.allreduce_naive(3), TypeError, r"tensor must be a torch\.Tensor, got int"),
    ("allreduce_recursive_doubling not a tensor", lambda t: col.allreduce_recursive_doubling("x"), TypeError, r"tensor must be a torch\.Tensor, got str"),
    ("allreduce_mean int64", lambda t: col.allreduce_mean(torch.ones(2, dtype=torch.int64)), TypeError, r"an average needs a floating-point tensor, got torch\.int64: pass tensor\.float\(\)"),
    ("allreduce_mean allreduce not a function", lambda t: col.allreduce_mean(torch.ones(2), "ring"), TypeError, r"allreduce must be a function such as allreduce_ring, got 'ring'"),
    ("accumulation_step more micro-batches than samples", lambda t: accumulate(micro_batches=5), ValueError, r"micro_batches=5 is more than the batch's 4 samples.*use at most 4"),
    ("accumulation_step float64 batch", lambda t: accumulate(X=X.double()), TypeError, r"X has dtype torch\.float64 but the model's parameters are torch\.float32: convert the batch"),
    ("global_mean negative size", lambda t: dp.global_mean(torch.ones(2), [3, -1]), ValueError, r"sizes\[1\] must be an integer >= 0, got -1"),
    ("study.plan seed twice", lambda t: st.plan(["split"], [1], [0, 0], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1), ValueError, r"seeds repeats \[0\] in \[0, 0\]: give each value once"),
    ("study.plan device count twice", lambda t: st.plan(["split"], [2, 2], [0], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1), ValueError, r"device_counts repeats \[2\]"),
    ("study.plan seed=-1", lambda t: st.plan(["split"], [1], [-1], data=TINY, model="lenet", batch=4, lr=0.1, epochs=1), ValueError, r"seed must be an integer >= 0, got -1"),
    ("crash_at_step step=-1", lambda t: ts.crash_at_step(0, 2, step=-1), ValueError, r"crash_rank and step must be integers >= 0; step is -1"),
    ("crash_at_step how", lambda t: ts.crash_at_step(0, 2, how="segfault"), ValueError, r"how must be one of \('raise', 'exit', 'kill'\), got 'segfault'"),
    # issue 23: raw errors from deep inside, now caught where the input enters
    ("train_step float64 batch", lambda t: step(X=X.double()), TypeError, r"X has dtype torch\.float64 but the model's parameters are torch\.float32: convert the batch with X\.to\(torch\.float32\)"),
    ("train_step uint8 images", lambda t: step(X=X.to(torch.uint8)), TypeError, r"X has dtype torch\.uint8 .*X\.float\(\) / 255"),
    ("train_step float labels", lambda t: step(y=Y.float()), TypeError, r"y holds torch\.float32 values, not class labels: pass integer labels \(y\.long\(\)\)"),
    ("train_step labels short", lambda t: step(y=Y[:3]), ValueError, r"X holds 4 samples but y 3 labels: give one label per sample"),
    ("train_step X not a tensor", lambda t: step(X=[[0.0]]), TypeError, r"X must be a torch\.Tensor, got list: pass the batch's inputs as one tensor"),
    ("split.train_batch float64 batch", lambda t: split.train_batch(X.double(), Y, [net()], CPU, 0.1), TypeError, r"X has dtype torch\.float64"),
    ("train_batch_foreach float labels", lambda t: split.train_batch_foreach(X, Y.float(), [net()], CPU, 0.1), TypeError, r"y holds torch\.float32 values, not class labels"),
    ("copy_replicas not a model", lambda t: split.copy_replicas(3, CPU), TypeError, r"net must be a torch\.nn\.Module \(a model\), got int"),
    ("launch timeout='10'", lambda t: rt.launch(col.whoami, 1, timeout="10"), TypeError, r"timeout must be a positive, finite number, got '10' of type str: give the seconds"),
    ("launch timeout=inf", lambda t: rt.launch(col.whoami, 1, timeout=INF), ValueError, r"timeout must be a positive, finite number, got inf"),
    ("launch port=-1", lambda t: rt.launch(col.whoami, 1, port=-1), ValueError, r"port must be an integer >= 0, got -1: give a TCP port from 1 to 65535"),
    ("launch port=70000", lambda t: rt.launch(col.whoami, 1, port=70000), ValueError, r"port must be at most 65535, got 70000"),
    ("launch port='29500'", lambda t: rt.launch(col.whoami, 1, port="29500"), TypeError, r"port must be an integer >= 0, got '29500' of type str"),
    ("check_same_tensor_size a list", lambda t: rt.check_same_tensor_size([1, 2], "all-reduce"), TypeError, r"tensor must be a torch\.Tensor, got list"),
    ("join_group timeout='x'", lambda t: rt.join_group("gloo", 0, 1, "x"), TypeError, r"timeout must be a positive, finite number, got 'x'"),
    ("load_iters TensorDataset", lambda t: core.load_iters(TENSORS, 4), TypeError, r"data must be a companion\.core\.Data .*got TensorDataset: use load_data\(profile\)"),
    ("train_worker TensorDataset", lambda t: col.train_worker(0, 1, TENSORS, "ci"), TypeError, r"data must be a companion\.core\.Data"),
    ("train_reference TensorDataset", lambda t: col.train_reference(1, TENSORS, "ci", global_batch=4, lr=0.1, steps=1), TypeError, r"data must be a companion\.core\.Data"),
    ("joined_batches TensorDataset", lambda t: col.joined_batches(1, TENSORS, 4), TypeError, r"data must be a companion\.core\.Data"),
    ("last_epoch_accuracies TensorDataset", lambda t: col.last_epoch_accuracies(1, TENSORS, "ci"), TypeError, r"data must be a companion\.core\.Data"),
    ("last_epoch_accuracies epochs=0", lambda t: col.last_epoch_accuracies(1, TINY, "ci", epochs=0), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("train_ddp TensorDataset", lambda t: ddp.train_ddp(TENSORS, "ci"), TypeError, r"data must be a companion\.core\.Data"),
    ("train_reference_ddp TensorDataset", lambda t: ddp.train_reference_ddp(1, TENSORS, "ci", global_batch=4, lr=0.1, steps=1), TypeError, r"data must be a companion\.core\.Data"),
    ("train_with_mistake TensorDataset", lambda t: ddp.train_with_mistake(0, 1, TENSORS), TypeError, r"data must be a companion\.core\.Data"),
    ("train_internals TensorDataset", lambda t: ic.train_internals(TENSORS, "ci"), TypeError, r"data must be a companion\.core\.Data"),
    ("train_elastic TensorDataset", lambda t: el.train_elastic(TENSORS, ddp.DDPConfig("ci"), el.ElasticOptions(str(t / "s.pt"))), TypeError, r"data must be a companion\.core\.Data"),
    ("study.subset TensorDataset", lambda t: st.subset(TENSORS, 2, 2), TypeError, r"data must be a companion\.core\.Data"),
    ("study.plan TensorDataset", lambda t: st.plan(["split"], [1], [0], data=TENSORS, model="lenet", batch=4, lr=0.1, epochs=1), TypeError, r"data must be a companion\.core\.Data"),
    ("describe_snapshot not a snapshot", lambda t: el.describe_snapshot({"model": {}}), el.SnapshotError, r"snapshot is not a snapshot \(a dict whose 'format' is not 1\): pass what make_snapshot returns"),
    ("describe_snapshot a number", lambda t: el.describe_snapshot(3), el.SnapshotError, r"snapshot is not a snapshot \(int\)"),
    ("gather no outputs", lambda t: dp.gather([], "cpu"), ValueError, r"outputs must hold at least 1 item\(s\), one output per replica, from parallel_apply; got \[\]"),
    ("gather not a list", lambda t: dp.gather(X, "cpu"), TypeError, r"outputs must be a list or tuple of one output per replica"),
    ("NetWithLoss not a model", lambda t: dp.NetWithLoss(3), TypeError, r"net must be a torch\.nn\.Module \(a model\), got int"),
    ("NetWithLoss loss not a function", lambda t: dp.NetWithLoss(net(), "ce"), TypeError, r"loss must be a function of \(output, y\), e\.g\. nn\.CrossEntropyLoss\(\), got 'ce'"),
    ("strip_module_prefix not a dict", lambda t: rt.strip_module_prefix(3), TypeError, r"state must be a state dict \(parameter names to tensors\), got int: pass net\.state_dict\(\)"),
    ("load_into not a dict", lambda t: rt.load_into(net(), [1]), TypeError, r"state must be a state dict .*got list"),
    ("Timer unknown device", lambda t: core.Timer("nodevice"), ValueError, r"'nodevice' is not a device: give 'cpu', 'cuda:0'"),
    ("physical_gpu_ids not a string", lambda t: dp.physical_gpu_ids(3), TypeError, r"value must be a CUDA_VISIBLE_DEVICES string such as '0,1' or 'GPU-\.\.\.', got 3"),
    ("physical_gpu_ids n_physical=-1", lambda t: dp.physical_gpu_ids("0,1", -1), ValueError, r"n_physical must be an integer >= 0, got -1: the number of GPUs"),
    ("visible_devices_in_subprocess not a string", lambda t: dp.visible_devices_in_subprocess(0), TypeError, r"value must be a CUDA_VISIBLE_DEVICES string such as '0,1'"),
    ("scatter not a tuple", lambda t: dp.scatter(X, CPU), TypeError, r"inputs must be a list or tuple of the forward call's arguments, e\.g\. \(X,\), got Tensor"),
    ("replicate not a model", lambda t: dp.replicate(3, CPU), TypeError, r"net must be a torch\.nn\.Module"),
    ("DataParallelByHand not a model", lambda t: dp.DataParallelByHand(3, CPU), TypeError, r"module must be a torch\.nn\.Module"),
    ("check_on_first_device not a model", lambda t: dp.check_on_first_device("net", CPU), TypeError, r"net must be a torch\.nn\.Module"),
    ("output_device_bytes not a model", lambda t: dp.output_device_bytes([X], 3), TypeError, r"net must be a torch\.nn\.Module"),
    ("final_accuracy no records", lambda t: core.final_accuracy([]), ValueError, r"final_accuracy needs at least one record"),
    ("save_records not records", lambda t: core.save_records([{"epoch": 1}], t / "r.json"), TypeError, r"records must hold companion\.core\.Record objects, got dict"),
    ("set_seed 2**64", lambda t: core.set_seed(2**64), ValueError, r"seed must be at most 18446744073709551615, got 18446744073709551616"),
    ("check_ranks_agree not a model", lambda t: rt.check_ranks_agree("net"), TypeError, r"module must be a torch\.nn\.Module"),
    ("describe_replica settings not a dict", lambda t: rt.describe_replica(net(), ["bucket_cap_mb"]), TypeError, r"settings must be a dict of the wrapper's settings"),
    # the checks themselves (every row above also goes through one of them)
    ("check_int 1.5", lambda t: core.check_int(1.5, "steps"), TypeError, r"steps must be an integer >= 1, got 1\.5 of type float"),
    ("check_positive nan", lambda t: core.check_positive(NAN, "lr"), ValueError, r"lr must be a positive, finite number, got nan"),
    ("check_choice unknown", lambda t: core.check_choice("x", "variant", ["a"]), ValueError, r"unknown variant 'x'; choose one of \['a'\]"),
    ("check_not_empty empty", lambda t: core.check_not_empty([], "data.train", "give samples"), ValueError, r"data\.train is empty \(0 samples\): give samples"),
    ("check_module not a model", lambda t: core.check_module(3, "module"), TypeError, r"module must be a torch\.nn\.Module"),
    ("check_tensor a list", lambda t: core.check_tensor([1], "x"), TypeError, r"x must be a torch\.Tensor, got list"),
    ("check_batch float64", lambda t: core.check_batch(net(), X.double(), Y), TypeError, r"X has dtype torch\.float64"),
    ("check_distinct repeats", lambda t: core.check_distinct([1, 2, 1], "seeds"), ValueError, r"seeds repeats \[1\] in \[1, 2, 1\]: give each value once"),
    ("check_micro_batches 0", lambda t: core.check_micro_batches(0, Y), ValueError, r"micro_batches must be an integer >= 1, got 0"),
    ("check_step too many micro-batches", lambda t: core.check_step(net(), X, Y, None, 8), ValueError, r"micro_batches=8 is more than the batch's 4 samples"),
    ("check_port 65536", lambda t: core.check_port(65536), ValueError, r"port must be at most 65535, got 65536"),
    ("check_data a tuple", lambda t: core.check_data((X, Y)), TypeError, r"data must be a companion\.core\.Data .*got tuple"),
    ("check_sequence a number", lambda t: core.check_sequence(3, "outputs", "tensors"), TypeError, r"outputs must be a list or tuple of tensors, got int"),
    ("check_lr 0", lambda t: core.check_lr(0), ValueError, r"lr must be a positive, finite number, got 0: pass a learning rate such as 0\.1"),
    ("check_training epochs=0", lambda t: core.check_training(0, 0.1, [1], [1]), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("positive_arg 0", lambda t: core.positive_arg(int)("0"), argparse.ArgumentTypeError, r"must be a positive, finite int, got '0'"),
    ("count_arg -1", lambda t: core.count_arg("-1"), argparse.ArgumentTypeError, r"must be an integer >= 0, got '-1'"),
    ("profile_arg laptop", lambda t: core.profile_arg("laptop"), argparse.ArgumentTypeError, r"unknown profile 'laptop'; valid profiles are: ci, cpu, gpu"),
    # issue 23: 0 is a value on every command line; repeated seeds; help and checks before any work
    ("study --batch 0", lambda t: cli(st.main, "--batch", "0"), ValueError, r"exit 2: .*argument --batch: must be a positive, finite int, got '0'"),
    ("study --lr 0", lambda t: cli(st.main, "--lr", "0"), ValueError, r"argument --lr: must be a positive, finite float, got '0'"),
    ("study --epochs 0", lambda t: cli(st.main, "--epochs", "0"), ValueError, r"argument --epochs: must be a positive, finite int, got '0'"),
    ("study --samples 0", lambda t: cli(st.main, "--samples", "0"), ValueError, r"argument --samples: must be a positive, finite int, got '0'"),
    ("study --seeds 0,0", lambda t: cli(st.main, "--seeds", "0,0"), ValueError, r"argument --seeds: the list repeats \[0\] in \[0, 0\]: give each value once"),
    ("study --seeds -1", lambda t: cli(st.main, "--seeds", "-1"), ValueError, r"argument --seeds: expected integers >= 0 separated by commas, got '-1'"),
    ("study --devices 0", lambda t: cli(st.main, "--devices", "0"), ValueError, r"argument --devices: expected integers >= 1 separated by commas, got '0'"),
    ("study --devices 1,x", lambda t: cli(st.main, "--devices", "1,x"), ValueError, r"argument --devices: expected integers separated by commas, got '1,x'"),
    ("study --profile laptop", lambda t: cli(st.main, "--profile", "laptop"), ValueError, r"argument --profile: unknown profile 'laptop'; valid profiles are: ci, cpu, gpu"),
    ("study --plot-only on an empty folder", lambda t: cli(st.main, "--plot-only", "--out", str(t)), ValueError, r"--plot-only redraws from .*study\.json, which does not exist: run the study first"),
    ("study --scaling medium", lambda t: cli(st.main, "--scaling", "medium"), ValueError, r"argument --scaling: invalid choice: 'medium'"),
    ("study --lr-rule sqrt", lambda t: cli(st.main, "--lr-rule", "sqrt"), ValueError, r"argument --lr-rule: invalid choice: 'sqrt'"),
    ("study --out under a file", lambda t: cli(st.main, "--plot-only", "--out", str(write(t, "f", b"") / "out")), ValueError, r"--plot-only redraws from .*f/out/study\.json, which does not exist"),
    *[(f"{name} {' '.join(argv[-2:])}", lambda t, c=CLI_CHECKS[name], a=argv: c(*a), ValueError,
       r"argparse exited with 2") for name, argv in ARGPARSE_REFUSES],
    ("elastic --snapshot missing", lambda t: elastic_cli("--epochs", "1"), ValueError, r"argparse exited with 2"),
    ("elastic --warmup-steps -1", lambda t: elastic_cli("--snapshot", "s.pt", "--warmup-steps", "-1"), ValueError, r"--warmup-steps must be >= 0, got -1: 0 for none"),
    ("elastic --momentum 1", lambda t: elastic_cli("--snapshot", "s.pt", "--momentum", "1"), ValueError, r"--momentum in \[0, 1\) is needed, got 1\.0: e\.g\. 0\.9, or 0"),
    ("elastic --clip 0", lambda t: elastic_cli("--snapshot", "s.pt", "--clip", "0"), ValueError, r"argparse exited with 2"),
    ("elastic --momentum nan", lambda t: elastic_cli("--snapshot", "s.pt", "--momentum", "nan"), ValueError, r"--momentum in \[0, 1\) is needed, got nan"),
    ("elastic --snapshot a directory", lambda t: elastic_cli("--snapshot", str(t)), ValueError, r"--snapshot .* is a directory; give a file name"),
    ("elastic --sharded ZeRO-4", lambda t: elastic_cli("--snapshot", "s.pt", "--sharded", "ZeRO-4"), ValueError, r"argparse exited with 2"),
    ("ElasticOptions method a name", lambda t: el.ElasticOptions("s", method="ZeRO-3").check(), TypeError, r"method must be of type ElasticMethod, got str: e\.g\. DDP, or ELASTIC_METHODS\[name\]"),
    ("ElasticOptions kill_after junk", lambda t: el.ElasticOptions("s", kill_after="1-30").check(), ValueError, r"kill_after must be 'RANK:STEP' or 'node:STEP' \(e\.g\. '1:30'\), got '1-30'"),
    ("elastic --kill-after junk", lambda t: elastic_cli("--snapshot", "s.pt", "--kill-after", "x:1"), ValueError, r"kill_after must be 'RANK:STEP' or 'node:STEP'"),
    ("load_snapshot of a folder", lambda t: el.load_snapshot(t), el.SnapshotError, r"is a directory; give the snapshot's file name \(a sharded snapshot, a folder, is read by chapter 9's load_sharded_snapshot\)"),
    ("elastic --model vgg", lambda t: elastic_cli("--snapshot", "s.pt", "--model", "vgg"), ValueError, r"unknown model 'vgg'"),
    ("elastic --log-dir under a file", lambda t: elastic_cli("--snapshot", "s.pt", "--log-dir", str(write(t, "f", b"") / "logs")), ValueError, r"--log-dir .*f is a file, not a directory"),
    ("troubleshoot --crash-rank -1", lambda t: cli(TROUBLESHOOT_MAIN, "--crash-rank", "-1"), ValueError, r"exit 2: .*--crash-rank and --step must be integers >= 0; --crash-rank is -1"),
    ("troubleshoot --step -1", lambda t: cli(TROUBLESHOOT_MAIN, "--step", "-1"), ValueError, r"--crash-rank and --step must be integers >= 0; --step is -1"),
    ("troubleshoot --how segfault", lambda t: cli(TROUBLESHOOT_MAIN, "--how", "segfault"), ValueError, r"argument --how: invalid choice: 'segfault'"),
    ("bench baseline --workers -1", lambda t: cli(bench_module("baseline").main, "--workers", "-1"), ValueError, r"argument --workers: must be an integer >= 0, got '-1'"),
    ("bench allreduce --mb 1e-7", lambda t: cli(bench_module("allreduce").main, "--mb", "1e-7"), ValueError, r"--mb 1e-07 is less than one float32 \(4 bytes\): give at least 4e-06"),
    *[(f"bench {name} --profile laptop", lambda t, n=name: cli(bench_module(n).main, "--profile", "laptop"), ValueError,
       r"argument --profile: unknown profile 'laptop'") for name in ("baseline", "compression", "dataparallel", "ddp", "internals", "loop", "split")],
    ("bench baseline --limit 0", lambda t: cli(bench_module("baseline").main, "--limit", "0"), ValueError, r"argument --limit: must be a positive, finite int, got '0'"),
    ("bench baseline --rounds 0", lambda t: cli(bench_module("baseline").main, "--rounds", "0"), ValueError, r"argument --rounds: must be a positive, finite int, got '0'"),

    # found by trying the rest of the surfaces: rows for functions that already refuse clearly
    ("faulty unknown failure", lambda t: col.faulty(0, 2, "melt"), ValueError, r"unknown failure 'melt'"),
    ("time_allreduce numels=[-1]", lambda t: col.time_allreduce(0, 1, [-1]), ValueError, r"numels must be integers >= 0, got \[-1\]"),
    ("uneven_gradients one size short", lambda t: col.uneven_gradients(0, 2, [4]), ValueError, r"give one size per rank"),
    ("collectives without a process group", lambda t: col.collectives(0, 2), RuntimeError, r"no process group: call rank_device\(\) inside a worker started by launch\(\)"),
    ("point_to_point without a process group", lambda t: col.point_to_point(0, 2), RuntimeError, r"no process group"),
    ("ring_trace without a process group", lambda t: col.ring_trace(0, 2), RuntimeError, r"no process group"),
    ("trace_allreduce without a process group", lambda t: col.trace_allreduce(0, 2), RuntimeError, r"no process group"),
    ("MathMode precision fp8", lambda t: core.MathMode("fp8", "cpu"), ValueError, r"precision must be one of \('fp32', 'bf16', 'fp16'\), 'auto' or 'fp64' \(float64, for checks\), got 'fp8'"),
    ("check_exact bf16", lambda t: core.check_exact("bf16", "train_reference_ddp"), ValueError, r"train_reference_ddp computes in fp32 or fp64 only, got precision='bf16': pass precision='fp64' for an equivalence check, or 'fp32'"),
    ("train_reference_ddp precision fp16", lambda t: ddp.train_reference_ddp(1, TINY, "ci", global_batch=4, lr=0.1, steps=1, precision="fp16"), ValueError, r"train_reference_ddp computes in fp32 or fp64 only, got precision='fp16'"),
    ("check_batch float32 batch into a float64 model that does not cast", lambda t: core.check_batch(net().double(), X, Y), TypeError, r"X has dtype torch\.float32 but the model's parameters are torch\.float64: convert the batch"),
    ("dataparallel.wrap_dataparallel unknown device", lambda t: dp.wrap_dataparallel(net(), ["tpu"]), ValueError, r"'tpu' is not a device"),
    ("peak_memory_per_device on CPUs", lambda t: dp.peak_memory_per_device(net(), X, Y, ["cpu", "cpu"]), ValueError, r"needs two or more distinct GPUs.*use output_device_bytes"),
    ("ddp_worker TensorDataset", lambda t: ddp.ddp_worker(0, 1, TENSORS), TypeError, r"data must be a companion\.core\.Data"),
    ("batchnorm_statistics without a process group", lambda t: ddp.batchnorm_statistics(0, 2, X, True), RuntimeError, r"no process group"),
    ("evaluate_three_ways without a process group", lambda t: ddp.evaluate_three_ways(0, 2, TINY), RuntimeError, r"no process group"),
    ("HookedDDP not a model", lambda t: ic.HookedDDP("net"), TypeError, r"module must be a torch\.nn\.Module"),
    ("internals_worker TensorDataset", lambda t: ic.internals_worker(0, 1, TENSORS), TypeError, r"data must be a companion\.core\.Data"),
    ("care_worker without a process group", lambda t: ic.care_worker(0, 2, X, Y), RuntimeError, r"HookedDDP needs a process group"),
    ("time_accumulation without a process group", lambda t: ic.time_accumulation(0, 2), RuntimeError, r"no process group"),
    ("pictures.record_allreduce unknown", lambda t: pic.record_allreduce("tree"), ValueError, r"cannot trace 'tree'; choose from"),
    ("pictures.record_forward unknown device", lambda t: pic.record_forward(net(), X, ["tpu"]), ValueError, r"'tpu' is not a device"),
    ("pictures.record_backward unknown param", lambda t: pic.record_backward(net(), X, Y, ["cpu"] * 2, "nope"), ValueError, r"the model has no parameter 'nope'; choose from \['0\.weight'"),
    ("pictures.record_backward unknown device", lambda t: pic.record_backward(net(), X, Y, ["tpu"]), ValueError, r"'tpu' is not a device"),
    ("pictures.record_orders n=0", lambda t: pic.record_orders(0, 2, 1), ValueError, r"n must be an integer >= 1, got 0"),
    ("study.fit_compute one point", lambda t: st.fit_compute([8], [1.0]), ValueError, r"need at least two"),
    ("study.lr_schedule rule sqrt", lambda t: st.lr_schedule(0.1, 2, "sqrt", 10), ValueError, r"unknown rule 'sqrt'; choose one of"),
    ("study.scaled_lr lr=0", lambda t: st.scaled_lr(0, 2, "linear"), ValueError, r"lr must be a positive, finite number, got 0"),
    ("study.train_as_published n_devices=0", lambda t: st.train_as_published(net(), 0, TINY, 4, 0.1, 1), ValueError, r"need a device count >= 1, got 0"),
    ("study.time_parts without a process group", lambda t: st.time_parts(0, 2, "lenet", [4]), RuntimeError, r"no process group"),
    ("troubleshoot.diagnose_hang unknown kind", lambda t: ts.diagnose_hang("order"), ValueError, r"kind must be one of \['op', 'shape', 'skip'\], got 'order'"),
    ("troubleshoot.mismatched unknown kind", lambda t: ts.mismatched(0, 2, "order"), ValueError, r"kind must be one of"),
    ("failures not torchrun's output", lambda t: ts.failures("all good"), ValueError, r"no 'Root Cause \(first observed failure\)' in this output: pass the stderr"),
    ("store_error port 0", lambda t: ts.store_error(0), ValueError, r"port must be an integer in 1\.\.65535, got 0"),
    ("try_interface not a name", lambda t: ts.try_interface(3), ValueError, r"name must be an interface name such as 'lo', got 3"),
    ("visible_devices not a string", lambda t: ts.visible_devices(3, 2), TypeError, r"CUDA_VISIBLE_DEVICES is a string such as '1,0', got 3"),
    ("visible_devices physical=-1", lambda t: ts.visible_devices("0", -1), ValueError, r"physical must be the number of GPUs \(>= 0\), got -1"),
    ("cuda_view not a string", lambda t: ts.cuda_view(0), TypeError, r"value must be a CUDA_VISIBLE_DEVICES string such as '1,0', or None \(unset\), got 0"),
    ("cuda_view timeout=0", lambda t: ts.cuda_view("0", 0), ValueError, r"timeout must be a positive, finite number, got 0"),
    ("masked not text", lambda t: ts.masked(b"port 29500"), TypeError, r"text must be a str \(a run's output\), got bytes"),
    ("save_snapshot to a directory", lambda t: el.save_snapshot({}, t), IsADirectoryError, r"is a directory; give a file name"),
    ("standalone_command nproc=0", lambda t: el.standalone_command(0), ValueError, r"nproc must be an integer >= 1, got 0"),
    ("check_entry_point another module", lambda t: el.check_entry_point(["python", "-m", "other"], [2]), el.LaunchFileError, r"not the entry point -m companion\.elastic"),
    # issue 23: the command lines tried again with 0, negative, duplicate and out-of-range values
    ("study --methods split,split", lambda t: cli(st.main, "--methods", "split,split"), ValueError, r"argument --methods: the list repeats \['split'\] in \['split', 'split'\]: give each value once"),
    ("study.RunSpec batch larger than the data", lambda t: st.RunSpec(TINY, "lenet", 1, 16, 0.1, 1), ValueError, r"global_batch 16 is more than the 12 training samples: give more samples \(--samples\) or a smaller batch"),
    ("bench dataparallel --batch-sizes 1 --devices 2", lambda t: cli(bench_module("dataparallel").main, "--batch-sizes", "1", "--devices", "2"), ValueError, r"batch size 1 is smaller than the 2 devices \(--batch-sizes, --devices\): give each device at least one sample"),
    ("ddp cli --seed 2**64", lambda t: ddp_cli("--seed", str(2**64)), ValueError, r"--seed must be at most 18446744073709551615, got 18446744073709551616: torch takes seeds below 2\*\*64"),
    ("elastic --seed 2**64", lambda t: elastic_cli("--snapshot", "s.pt", "--seed", str(2**64)), ValueError, r"--seed must be at most 18446744073709551615"),
    ("DDPConfig seed=2**64", lambda t: ddp_config(seed=2**64), ValueError, r"seed must be at most 18446744073709551615"),
    # issue 23's own examples that need a process group: a one-process gloo group, made and ended in the row
    # (ranks that disagree, class 3, need two ranks or more: tests/runtime/test_agree.py, 2 and 3 ranks)
    ("NaiveDDP a dict batch with weigh_by_samples", lambda t: in_group(lambda: ic.NaiveDDP(net(), weigh_by_samples=True)({"x": X})), TypeError, r"weigh_by_samples counts the samples of forward's first argument, a tensor with one row per sample; got dict: pass the input tensor first, or weigh_by_samples=False"),
    ("BucketedDDP weigh_by_samples a string", lambda t: in_group(lambda: ic.BucketedDDP(net(), weigh_by_samples="no")), TypeError, r"weigh_by_samples must be of type bool, got str: pass True or False \(a string such as 'no' is not False\)"),
    ("NaiveDDP finish_in_backward a number", lambda t: in_group(lambda: ic.NaiveDDP(net(), finish_in_backward=0)), TypeError, r"finish_in_backward must be of type bool, got int"),
    ("HookedDDP no trainable parameter", lambda t: in_group(lambda: ic.HookedDDP(torch.nn.Linear(2, 2).requires_grad_(False))), ValueError, r"the module has no trainable parameters: nothing to all-reduce \(torch's DDP refuses it too\); train it without a wrapper"),
    ("BucketedDDP a dict batch with weigh_by_samples", lambda t: in_group(lambda: ic.BucketedDDP(net(), weigh_by_samples=True)({"x": X})), TypeError, r"weigh_by_samples counts .*got dict"),
    ("NaiveDDP a step without finish()", lambda t: in_group(lambda: _step_without_finish(ic.NaiveDDP)), RuntimeError, r"NaiveDDP: a forward pass began a new step before finish\(\) ended the last one: call net\.finish\(\) after loss\.backward\(\)"),
    ("BucketedDDP a step without finish()", lambda t: in_group(lambda: _step_without_finish(ic.BucketedDDP)), RuntimeError, r"BucketedDDP: a forward pass began a new step before finish\(\)"),
    ("physical_gpu_ids a GPU twice", lambda t: dp.physical_gpu_ids("0,1,0"), ValueError, r"CUDA_VISIBLE_DEVICES='0,1,0' lists GPU 0 twice: list each GPU once"),
    # issue 23, the last public names: pictures, troubleshoot
    ("pictures.eval_counts world_size=0", lambda t: pic.eval_counts(10, 0), ValueError, r"world_size must be an integer >= 1, got 0"),
    ("pictures.eval_counts n=-1", lambda t: pic.eval_counts(-1, 2), ValueError, r"n must be an integer >= 1, got -1: the test set's sample count"),
    ("pictures.contributors a rank counted twice", lambda t: pic.contributors(2, 0), ValueError, r"2 at position 0 counts rank 0 2 times"),
    ("pictures.figure too wide", lambda t: pic.figure(20, 3), ValueError, r"a figure of 20 x 3 inches does not fit the page: keep the width within"),
    ("pictures.trace_step unknown param", lambda t: pic.trace_step(X, Y, [net()], CPU, 0.1, param="nope"), ValueError, r"the model has no parameter 'nope'; choose from \['0\.weight'"),
    ("troubleshoot.temporary_env a number", lambda t: ts.temporary_env(X=3).__enter__(), TypeError, r"X must be a string or None \(to unset it\), got int: write X='3'"),
    ("troubleshoot.oversubscription world_size=0", lambda t: ts.oversubscription(0), ValueError, r"world_size must be an integer >= 1, got 0"),
    # issue 23, the last public names: elastic
    ("elastic.check_format a list", lambda t: el.check_format([], t / "s.pt"), el.SnapshotError, r"s\.pt is not a snapshot of this format"),
    ("elastic.parse_kill no step", lambda t: el.parse_kill("node"), ValueError, r"kill_after must be 'RANK:STEP' or 'node:STEP' \(e\.g\. '1:30'\), got 'node'"),
    ("elastic.restore_rest not a snapshot", lambda t: el.restore_rest({}, None), el.SnapshotError, r"snapshot is not a snapshot \(a dict whose 'format' is not 1\)"),
    ("sharding.restore_sharded not a snapshot", lambda t: sh.restore_sharded({}, None, None, None), el.SnapshotError, r"snapshot is not a snapshot \(a dict whose 'format' is not 1\)"),
    ("elastic.global_batches global_batch=0", lambda t: el.global_batches(range(10), 2, 0, 0), ValueError, r"global_batch must be an integer >= 1, got 0: the samples of one step over all ranks"),
    ("elastic.check_dockerfile missing file", lambda t: el.check_dockerfile(t / "Dockerfile"), FileNotFoundError, r"Dockerfile"),
    ("elastic.check_sbatch missing file", lambda t: el.check_sbatch(t / "job.sbatch"), FileNotFoundError, r"job\.sbatch"),
    ("elastic.check_pytorchjob a path, not the manifest", lambda t: el.check_pytorchjob("pytorchjob.yaml"), TypeError, r"doc must be the manifest as a dict, got str: pass yaml\.safe_load\(open\(path\)\)"),
    ("elastic.check_t9k_job a list", lambda t: el.check_t9k_job([]), TypeError, r"doc must be the manifest as a dict, got list"),
    ("elastic.check_trainjob no spec", lambda t: el.check_trainjob({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}, "job.yaml"), el.LaunchFileError, r"job\.yaml: no 'spec' where the manifest needs one"),
    ("elastic.check_resumable not a snapshot", lambda t: el.check_resumable({"model": {}}, {}), el.SnapshotError, r"snapshot is not a snapshot \(a dict whose 'format' is not 1\)"),
    ("elastic.make_snapshot no scheduler", lambda t: el.make_snapshot(*_trio()[:2], None, epoch=0, position=0, step=0, config={}), TypeError, r"scheduler must be of type LRScheduler, got NoneType: pass warmup_schedule\(optimizer, 0\)"),
    ("sharding.save_sharded_snapshot no scheduler", lambda t: sh.save_sharded_snapshot(*_trio()[:2], None, t, epoch=0, position=0, step=0, config={}), TypeError, r"scheduler must be of type LRScheduler, got NoneType"),
    ("elastic.make_snapshot epoch=-1", lambda t: el.make_snapshot(*_trio(), epoch=-1, position=0, step=0, config={}), ValueError, r"epoch must be an integer >= 0, got -1"),
    ("elastic.restore a path, not a snapshot", lambda t: el.restore("s.pt", *_trio()), el.SnapshotError, r"snapshot is not a snapshot \(str\): pass what make_snapshot returns or load_snapshot reads"),
    ("elastic.set_rng_state torch's state tensor", lambda t: el.set_rng_state(torch.get_rng_state()), TypeError, r"state must be what rng_state\(\) returns \(a dict\), got Tensor"),
    ("elastic.warmup_schedule warmup_steps=-1", lambda t: el.warmup_schedule(_trio()[1], -1), ValueError, r"warmup_steps must be an integer >= 0, got -1: 0 for none"),
    ("elastic.join_elastic outside torchrun", lambda t: el.join_elastic(), RuntimeError, r"not set: start this with torchrun"),
    ("elastic.softmax_loss_floor classes=0", lambda t: el.softmax_loss_floor(0), ValueError, r"classes must be an integer >= 1, got 0"),
    ("elastic.double_softmax epochs=0", lambda t: el.double_softmax(TINY, 0, 0.1), ValueError, r"epochs must be an integer >= 1, got 0"),
    ("elastic.lr_without_warmup a batch larger than the data", lambda t: el.lr_without_warmup(TINY, 1, 1, 0), ValueError, r"a global batch of 32 \(32 x world_size 1\) is more than the 12 training samples"),
    # issue 23, the last public names: study
    ("study.aggregate no records", lambda t: st.aggregate([]), ValueError, r"aggregate needs records: run a study or load one"),
    ("study.spread no values", lambda t: st.spread([]), ValueError, r"spread needs at least one value"),
    ("study.crossing one time short", lambda t: st.crossing([8, 16, 32], [0.1, 0.2], 0.3), ValueError, r"give one compute time per batch size, got 3 batch sizes and 2 times"),
    ("study.carried_over not a model", lambda t: st.carried_over(net().state_dict()), TypeError, r"net must be a torch\.nn\.Module \(a model\), got OrderedDict"),
    ("study.run_study unknown scaling", lambda t: st.run_study([], "medium"), ValueError, r"unknown scaling 'medium'; choose one of"),
    ("study.save_study no records", lambda t: st.save_study([], t / "study"), ValueError, r"save_study needs at least one record: run a study first"),
    # issue 23, the last public names: split, collectives, runtime, ddp, internals
    ("split.sgd a model, not its parameters", lambda t: split.sgd(net(), 0.1), TypeError, r"params must be an iterable of parameters, got Sequential: pass net\.parameters\(\)"),
    ("ddp.sgd lr=nan", lambda t: ddp.sgd(net().parameters(), NAN), ValueError, r"lr must be a positive, finite number, got nan"),
    ("ddp.sgd a model, not its parameters", lambda t: ddp.sgd(net(), 0.1), TypeError, r"params must be an iterable of parameters, got Sequential"),
    ("check_parameters a model", lambda t: core.check_parameters(net()), TypeError, r"params must be an iterable of parameters, got Sequential: pass net\.parameters\(\)"),
    ("split.forward_backward one y shard short", lambda t: split.forward_backward([net(), net()], [X[:2], X[2:]], [Y[:2]], 4, CE), ValueError, r"got 2 replicas, 2 X shards and 1 y shards: give one shard of each per replica"),
    ("split.forward_backward a shard's size as batch_size", lambda t: split.forward_backward([net()], [X], [Y], 2, CE), ValueError, r"batch_size must be the global batch, the shards' 4 samples, got 2"),
    ("split.forward_backward_once no replicas", lambda t: split.forward_backward_once([], [], [], 4, CE), ValueError, r"replicas must hold at least 1 item\(s\), models, one per device"),
    ("split.shard_loss batch_size=0", lambda t: split.shard_loss(net(), X, Y, 0, CE), ValueError, r"batch_size must be an integer >= 1, got 0: the global batch's sample count"),
    ("split.allreduce_grads one model, not a list", lambda t: split.allreduce_grads(net()), TypeError, r"replicas must be a list or tuple of models, one per device, got Sequential"),
    ("split.allreduce_grads_foreach no replicas", lambda t: split.allreduce_grads_foreach([]), ValueError, r"replicas must hold at least 1 item\(s\)"),
    ("split.allreduce_on_devices a tensor, not a list", lambda t: split.allreduce_on_devices(X), TypeError, r"tensors must be a list or tuple of tensors, one per device, got Tensor"),
    ("collectives.whoami without a process group", lambda t: col.whoami(0, 2), RuntimeError, r"whoami needs a process group: call it inside a worker started by companion\.runtime\.launch"),
    ("collectives.check_allreduce without a process group", lambda t: col.check_allreduce(0, 2), RuntimeError, r"no process group: call rank_device\(\) inside a worker started by launch\(\)"),
    ("collectives.plot_model no measurements", lambda t: col.plot_model([], 1e-5, 1e-9), ValueError, r"the plot needs measurements with 2 or more processes"),
    ("runtime.check_group without a process group", lambda t: rt.check_group("my_worker"), RuntimeError, r"my_worker needs a process group: call it inside a worker started by companion\.runtime\.launch \(or torchrun\)"),
    ("runtime.ddp_device_ids a string", lambda t: rt.ddp_device_ids("cuda:0"), TypeError, r"device must be a torch\.device, got 'cuda:0': pass torch\.device\('cuda:0'\)"),
    ("runtime.event_files missing folder", lambda t: rt.event_files(t / "none"), FileNotFoundError, r"log_dir '.*none' is not a folder: pass the log_dir the run wrote to"),
    ("ddp.check_eval_count counted some twice", lambda t: ddp.check_eval_count(12, 10), ddp.EvaluationMiscount, r"counted 12 samples for a test set of 10 \(some twice\): give each rank a disjoint share"),
    ("ddp.check_order_changes the same order twice", lambda t: ddp.check_order_changes([torch.arange(4), torch.arange(4)]), ddp.SameOrderEveryEpoch, r"epochs 1 and 2 read the same samples .*call sampler\.set_epoch\(epoch\)"),
    ("ddp.check_unused_parameters an unused parameter", lambda t: ddp.check_unused_parameters(ic.TiedFrozenUnused(), X, Y), ddp.UnusedParameters, r"does not use the parameters \['unused'\].*find_unused_parameters=True"),
    ("ddp.data_parallel_on not a model", lambda t: ddp.data_parallel_on("net", "cpu"), TypeError, r"net must be a torch\.nn\.Module \(a model\), got str"),
    ("ddp.detect no runs", lambda t: ddp.detect([], 10), ValueError, r"traces is empty: give one RankTrace per rank"),
    ("ddp.gather_traces without a process group", lambda t: ddp.gather_traces(net(), []), RuntimeError, r"gather_traces needs a process group"),
    ("ddp.setup_rank an unresolved config", lambda t: ddp.setup_rank(TINY, ddp.DDPConfig(profile="ci"), "ddp", lambda n: n), TypeError, r"cfg must be a resolved DDPConfig, got .*: pass cfg\.resolve\(world_size\)"),
    ("ddp.setup_rank TensorDataset", lambda t: ddp.setup_rank(TENSORS, ddp_config(), "ddp", lambda n: n), TypeError, r"data must be a companion\.core\.Data"),
    ("ddp.setup_rank without a process group", lambda t: ddp.setup_rank(TINY, ddp_config(), "ddp", lambda n: n), RuntimeError, r"setup_rank needs a process group"),
    ("ddp.setup_rank per_rank_batch larger than the share", lambda t: in_group(lambda: ddp.setup_rank(TINY, ddp.DDPConfig(profile="ci", per_rank_batch=16).resolve(1), "ddp", lambda n: n)), ValueError, r"per_rank_batch 16 is larger than each rank's share of the training set \(12 samples over 1 rank\(s\)\)"),
    ("ddp.wrap_ddp without a process group", lambda t: ddp.wrap_ddp(net()), RuntimeError, r"wrap_ddp needs a process group"),
    ("ddp.uneven_shares no rank", lambda t: ddp.uneven_shares([]), ValueError, r"counts must give each rank's number of batches, got \[\]"),
    ("ddp.uneven_shares a negative count", lambda t: ddp.uneven_shares([2, -1]), ValueError, r"counts\[1\] must be an integer >= 0, got -1"),
    ("ddp.train_joined without a process group", lambda t: ddp.train_joined(net(), torch.optim.SGD(net().parameters(), 0.1), []), RuntimeError, r"train_joined needs a process group"),
    ("ddp.train_joined not a model", lambda t: ddp.train_joined("net", None, []), TypeError, r"net must be a torch\.nn\.Module"),
    ("ddp.one_process_joined no batch", lambda t: ddp.one_process_joined(net(), torch.optim.SGD(net().parameters(), 0.1), [[], []]), ValueError, r"shares must hold each rank's list of \(X, y\) batches"),
    ("ddp.train_uneven without a process group", lambda t: ddp.train_uneven(net(), None, [], (X[:0], Y[:0])), RuntimeError, r"train_uneven needs a process group"),
    ("ddp.one_process_joined no rank", lambda t: ddp.one_process_joined(net(), torch.optim.SGD(net().parameters(), 0.1), []), ValueError, r"shares must hold each rank's list"),
    ("ddp.expected_params no join", lambda t: ddp.expected_params([[]], net, "no join"), ValueError, r"a run with no join has no result: it hangs; pick another how"),
    ("ddp.join_worker an unknown way", lambda t: ddp.join_worker(0, 1, [[]], net, "typo"), ValueError, r"unknown how 'typo'; choose one of \['by hand'"),
    ("internals.compile_worker unknown variant", lambda t: ic.compile_worker(0, 1, ("DDP",)), ValueError, r"unknown variant 'DDP'; choose one of \['eager DDP'"),
    ("internals.compile_worker steps=2", lambda t: ic.compile_worker(0, 1, steps=2), ValueError, r"steps must be an integer >= 3, got 2"),
    ("internals.GraphLog unknown compiler", lambda t: ic.GraphLog("tvm"), ValueError, r"unknown compiler 'tvm'; choose one of \['inductor', 'aot_eager'\]"),
    ("internals.OwnModule a function", lambda t: ic.OwnModule(len), TypeError, r"model must be of type Module, got builtin_function_or_method: pass the model to wrap"),
    ("ddp.join_worker a wrapper that wraps nothing", lambda t: ddp.join_worker(0, 1, [[]], net, "by the loop", wrapper="DDP"), TypeError, r"wrapper must wrap a model \(DDP, or a class of chapter 6\), got 'DDP'"),
    ("internals.broadcast_state without a process group", lambda t: ic.broadcast_state(net()), RuntimeError, r"broadcast_state needs a process group"),
    ("internals.bucket_sizes cap=0", lambda t: ic.bucket_sizes(net(), 0), ValueError, r"bucket_cap_mb must be a positive, finite number, got 0"),
    ("internals.plot_sweep predicted short", lambda t: ic.plot_sweep([1, 25], {"BucketedDDP": [0.1, 0.2]}, [0.1]), ValueError, r"give one time per bucket cap: 2 caps, but lengths \{'predicted': 1, 'BucketedDDP': 2\}"),
    ("internals.trainable_parameters a state dict", lambda t: ic.trainable_parameters(net().state_dict()), TypeError, r"net must be a torch\.nn\.Module \(a model\), got OrderedDict"),
    ("internals.TiedFrozenUnused width=0", lambda t: ic.TiedFrozenUnused(width=0), ValueError, r"width must be an integer >= 1, got 0"),
    ("check_instance a string", lambda t: core.check_instance("bf16", "mode", core.MathMode, "pass MathMode(...)"), TypeError, r"mode must be of type MathMode, got str: pass MathMode\(\.\.\.\)"),
    # issue 23, the last public names: core
    ("clip_before_step max_norm=0", lambda t: core.clip_before_step(torch.optim.SGD(net().parameters(), 0.1), 0), ValueError, r"max_norm must be a positive, finite number, got 0: the largest gradient norm a step may take"),
    ("clip_before_step max_norm=True", lambda t: core.clip_before_step(torch.optim.SGD(net().parameters(), 0.1), True), TypeError, r"max_norm must be a positive, finite number, got True"),
    ("clip_before_step a model, not its optimizer", lambda t: core.clip_before_step(net(), 1.0), TypeError, r"optimizer must be of type Optimizer, got Sequential: pass the torch\.optim\.Optimizer that steps the model"),
    ("train clip=-1", lambda t: core.train(net(), *iters(), epochs=1, lr=0.1, clip=-1, warmup_steps=0), ValueError, r"max_norm must be a positive, finite number, got -1"),
    ("sgd_steps clip=nan", lambda t: core.sgd_steps(net(), batches(), 0.1, 1, NAN), ValueError, r"max_norm must be a positive, finite number, got nan"),
    ("DDPConfig clip=0", lambda t: ddp_config(clip=0), ValueError, r"clip must be a positive, finite number, got 0: the largest gradient norm, or None not to clip"),
    ("ddp cli --clip 0", lambda t: ddp_cli("--clip", "0"), ValueError, r"argparse exited with 2"),
    ("set_lr lr=-1", lambda t: core.set_lr(torch.optim.SGD(net().parameters(), 0.1), -1), ValueError, r"lr must be a finite number >= 0, got -1: pass the rate to step with"),
    ("set_lr a model, not its optimizer", lambda t: core.set_lr(net(), 0.1), TypeError, r"optimizer must be of type Optimizer, got Sequential: pass the optimizer itself"),
    ("step_for a precision name", lambda t: core.step_for("bf16"), TypeError, r"mode must be of type MathMode, got str: pass MathMode\(profile\.precision, device\)"),
    ("train_epoch max_steps=0", lambda t: core.train_epoch(net(), iters()[0], torch.nn.CrossEntropyLoss(), torch.optim.SGD(net().parameters(), 0.1), max_steps=0), ValueError, r"max_steps must be an integer >= 1, got 0: None for the whole pass"),
    ("train_epoch not a model", lambda t: core.train_epoch([net()], iters()[0], torch.nn.CrossEntropyLoss(), None), TypeError, r"net must be a torch\.nn\.Module \(a model\), got list"),
    ("flat_params a state dict", lambda t: core.flat_params(net().state_dict()), TypeError, r"net must be a torch\.nn\.Module \(a model\), got OrderedDict"),
    ("model_device a list of replicas", lambda t: core.model_device([net()]), TypeError, r"net must be a torch\.nn\.Module \(a model\), got list"),
    ("synchronize unknown device", lambda t: core.synchronize("tpu"), ValueError, r"'tpu' is not a device: give 'cpu', 'cuda:0'"),
    ("synchronize_all one device, not a list", lambda t: core.synchronize_all("cpu"), ValueError, r"need at least one device, got 'cpu': pass a list"),
    ("describe_devices no devices", lambda t: core.describe_devices([]), ValueError, r"need at least one device, got \[\]"),
    ("best_precision a GPU that is not here", lambda t: core.best_precision("cuda:99"), ValueError, r"device cuda:99 is not here \(\d+ GPU\(s\) visible\): pass 'cpu'"),
    ("best_precision unknown device", lambda t: core.best_precision("tpu"), ValueError, r"'tpu' is not a device"),
    ("round_to_tf32 float64", lambda t: core.round_to_tf32(torch.zeros(2, dtype=torch.float64)), TypeError, r"round_to_tf32 needs a float32 tensor, got torch\.float64: pass x\.float\(\)"),
    ("round_to_tf32 a number", lambda t: core.round_to_tf32(0.5), TypeError, r"x must be a torch\.Tensor, got float: pass a float32 tensor"),
    ("tf32_emulation not a model", lambda t: core.tf32_emulation("net").__enter__(), TypeError, r"net must be a torch\.nn\.Module \(a model\), got str"),
    ("gradient_gap float labels", lambda t: core.gradient_gap(net(), X, Y.float()), TypeError, r"y holds torch\.float32 values, not class labels"),
    ("gradient_gap float64 batch", lambda t: core.gradient_gap(net(), X.double(), Y), TypeError, r"X has dtype torch\.float64 but the model's parameters are torch\.float32"),
    ("amp_train_step float64 batch", lambda t: core.amp_train_step(net(), X.double(), Y, torch.nn.CrossEntropyLoss(), None, core.MathMode("bf16", "cpu")), TypeError, r"X has dtype torch\.float64"),
    ("amp_train_step a precision name", lambda t: core.amp_train_step(net(), X, Y, torch.nn.CrossEntropyLoss(), None, "bf16"), TypeError, r"mode must be of type MathMode, got str"),
    ("progress_bar total=2.5", lambda t: core.progress_bar(2.5, "steps").__enter__(), TypeError, r"total must be an integer >= 0, got 2\.5: the number of steps"),
    ("load_synthetic n_train=0", lambda t: core.load_synthetic(0, 10), ValueError, r"n_train must be an integer >= 1, got 0: each set needs samples"),
    ("load_synthetic seed=-1", lambda t: core.load_synthetic(10, 10, -1), ValueError, r"seed must be an integer >= 0, got -1"),
    ("load_fashion_mnist offline with download=False", lambda t: core.load_fashion_mnist(t, download=False), FileNotFoundError, r"Fashion-MNIST is not in .*download=False.*use download=True.*load_data\('mnist-sample'\)"),
    ("ConvNet num_classes=0", lambda t: core.ConvNet(0), ValueError, r"num_classes must be an integer >= 1, got 0"),
    ("Residual stride=0", lambda t: core.Residual(3, 3, stride=0), ValueError, r"stride must be an integer >= 1, got 0"),
    ("Residual out_channels=2.0", lambda t: core.Residual(3, 2.0), TypeError, r"out_channels must be an integer >= 1, got 2\.0"),
    ("lenet_bn num_classes=0", lambda t: core.lenet_bn(0), ValueError, r"num_classes must be an integer >= 1, got 0"),
    ("core.Ratio no rounds", lambda t: core.Ratio.of([]), ValueError, r"a ratio needs one or more positive, finite per-round values, got \[\]"),
    ("core.paired_ratio uneven rounds", lambda t: core.paired_ratio([1.0], [1.0, 2.0]), ValueError, r"paired rounds need as many times on each side, got 1 and 2: time both sides in every round"),
    ("core.LoadWatch own=0", lambda t: core.LoadWatch(0), ValueError, r"own must be an integer >= 1, got 0"),
    ("core.Target op '<'", lambda t: core.Target("a / b", "<", 1.0, "bench x"), ValueError, r"op"),
    ("core.judge against a word", lambda t: core.judge(core.Ratio.of([1.0, 2.0]), "fast"), TypeError, r"against must be a positive, finite number, got .fast. of type str: a Target from TARGETS, or 1"),
    ("core.rotated nothing to rotate", lambda t: core.rotated([], 1), ValueError, r"nothing to rotate: give the sides that take turns"),
]
# fmt: on


@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(tmp_path, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path)


def test_the_table_covers_every_subpackage():
    covered = {c[0].split()[0].split(".")[0] for c in CASES}
    assert len(CASES) >= 100 and len(covered) >= 60


# ---------------------------------------------------------------------------------------------
# Coverage: every public function and class (each subpackage's __all__) and every command-line
# option (each argparse parser the package builds) has a row in CASES or a recorded reason.
#
# A row covers "package.name" when its id starts with "package.name " or, for a name that only
# one subpackage exports, with "name ". A command-line row covers "<cli> <option>" when its id
# starts with it (e.g. "study --batch 0", "bench allreduce --mb 0"); "ddp cli --x" and
# "study.cli --x" count as "ddp --x" and "study --x". To add a public name (another branch's
# new function): add a row to CASES, or a reason to NO_ROW; an option: a row, or CLI_NO_ROW.
# ---------------------------------------------------------------------------------------------
from .sharding.test_bad_input import CASES as SHARDING_CASES  # noqa: E402
from .slowlinks.test_bad_input import CASES as SLOWLINKS_CASES  # noqa: E402

# A table, one row per line: not reformatted.
# fmt: off
PACKAGES = ["core", "runtime", "split", "collectives", "dataparallel", "ddp", "pictures",
            "internals", "sharding", "slowlinks", "study", "elastic", "troubleshoot", "bench"]
# fmt: on
RECORD = "a record (NamedTuple or dataclass) that the package builds and returns; its fields are checked where a function reads them"
FORMATTER = (
    "an argparse formatter class, handed to ArgumentParser by the package, never a user's value"
)
LAUNCHER_PART = "a part of launch() (the supervisor), called with the launcher's own process lists, never a user's values"
NO_INPUT = "takes no argument that a user could get wrong (it reads the machine, the environment or the OS)"
CLI_FUNCTIONS = {  # the command lines' entry points, covered by the command-line rows of their CLI
    "study": ["study.main", "study.parse_args"],
    "ddp": ["ddp.main", "ddp.build_parser", "ddp.check_options"],
    "elastic": ["elastic.main", "elastic.build_parser"],
    "troubleshoot": ["troubleshoot.main"],
}
WORKER = "a worker that companion.runtime.launch starts with the package's own arguments; its public front (train_sharded, shard) has the rows"
TRACE = "draws or reads the traces that the package's record_* functions and traced all-reduces return, never a user's values"
TAKES_OWN = "takes only objects the package builds for it (a Rank from setup_rank, a rebuilt DDP), not a user's values"
NO_ROW = {  # 'package.name': why it needs no bad-input row
    "elastic.ElasticMethod": "a named tuple of functions; ElasticOptions.check refuses anything else",
    "core.ProcessPlan": "a named tuple of values that Profile.processes builds; nothing to refuse",
    "sharding.is_sharded_checkpoint": "a yes-or-no question about any path: nothing to refuse",
    "sharding.last_saved": "a question about any path (the folder found, or None): nothing to refuse",
    "core.keep_freed_memory": "takes no arguments; tests/core/test_allocator.py measures it",
    "core.reduce_scatter_single": "passes its arguments to torch.distributed's own collective, which checks them",
    "core.all_gather_single": "passes its arguments to torch.distributed's own collective, which checks them",
    "runtime.train_epochs": TAKES_OWN,
    "runtime.epoch_record": TAKES_OWN,
    "runtime.Rank": RECORD,
    "internals.fill_unused": TAKES_OWN,
    "internals.Compiled": RECORD,
    "internals.used_anywhere": TAKES_OWN,
    "internals.sample_weight": TAKES_OWN,
    "internals.recording": TAKES_OWN,
    "elastic.StepLog": TAKES_OWN,
    "internals.can_finish_in_backward": "takes no argument",
    "internals.in_backward": "takes no argument",
    "internals.dropin_worker": "a worker that runs the package's own cases, with no argument but rank and world size",
    "internals.unused_after_accumulation": "a worker that runs one of the package's own cases, with no argument but rank and world size",
    "internals.dropin_table": "reads the dict that dropin_worker returns, never a user's values",
    "internals.hook_parameters": "called by the wrappers' constructors with their own module and parameters, after those are checked",
    "internals.reachable_parameters": "walks whatever forward returned: a structure without tensors reaches nothing (an empty set), which is no error",
    "slowlinks.orthonormal": "passes its argument to torch.linalg.qr, which checks it (a matrix, floating point)",
    "slowlinks.hooks_worker": WORKER,
    "slowlinks.powersgd_worker": WORKER,
    "slowlinks.periodic_worker": WORKER,
    "slowlinks.error_feedback_worker": WORKER,
    "slowlinks.torch_powersgd_worker": WORKER,
    "slowlinks.streaming_worker": WORKER,
    "slowlinks.drift_worker": WORKER,
    "slowlinks.slowlinks_worker": WORKER,
    "slowlinks.SlowResult": RECORD,
    "slowlinks.Link": RECORD,
    "sharding.compare_worker": WORKER,
    "sharding.sharded_worker": WORKER,
    "sharding.state_worker": WORKER,
    "sharding.saved_weights_worker": WORKER,
    "sharding.clip_norm_worker": WORKER,
    "sharding.hsdp_worker": WORKER,
    "sharding.accumulation_worker": WORKER,
    "sharding.recompute_worker": WORKER,
    "sharding.hsdp_by_hand_worker": WORKER,
    "sharding.hybrid_step": TAKES_OWN,
    "sharding.live_tensor_bytes": "takes no argument: it counts the tensors this process holds",
    "sharding.time_worker": WORKER,
    "sharding.ShardedResult": RECORD,
    "sharding.Unit": RECORD,
    "sharding.GradBucket": RECORD,
    "sharding.Ledger": "a counter that count_bytes() installs; it takes no user value",
    "core.Load": RECORD,
    "core.Verdict": RECORD,
    "core.load_average": NO_INPUT,
    "core.scheduler_times": "reads the OS's per-thread counters; an absent or unreadable directory gives None (tested)",
    "core.cpu_share": "takes two readings of scheduler_times() (None where unmeasured); it reads nothing from a user",
    "core.record_maker": "called by the package's trainers with the labels they have checked, never a user's values",
    "core.headroom": "sets the limits of an axes the package's own plot functions drew",
    "core.legend_below": "lays out a figure the package's own plot functions drew",
    "sharding.guard_reads": "called by Zero3 on the modules it has just sharded, never with a user's values",
    "sharding.is_placeholder": "a yes/no question about any tensor: every tensor has an answer",
    "slowlinks.SlowMethod": RECORD,
    "sharding.TimedZero3": "Zero3 with a timeline: its arguments are Zero3's, whose rows are in tests/sharding/test_bad_input.py",
    "sharding.ShardedOptimizer": "the base class of Zero1/Zero2/Zero3, whose rows are in tests/sharding/test_bad_input.py",
    "collectives.Measurement": RECORD,
    "collectives.Step": RECORD,
    "collectives.TrainResult": RECORD,
    "core.Data": RECORD,
    "core.Profile": RECORD,
    "core.Record": RECORD,
    "core.Source": RECORD,
    "ddp.DDPResult": RECORD,
    "ddp.MistakeRun": RECORD,
    "ddp.RankTrace": RECORD,
    "elastic.ElasticResult": RECORD,
    "internals.Bucket": RECORD,
    "internals.Event": RECORD,
    "internals.InternalsResult": RECORD,
    "pictures.ForwardTrace": RECORD,
    "pictures.SplitTrace": RECORD,
    "pictures.BackwardTrace": RECORD,
    "runtime.TorchrunResult": RECORD,
    "study.Method": RECORD,
    "study.Parts": RECORD,
    "study.Point": RECORD,
    "study.Projection": RECORD,
    "study.StudyRecord": RECORD,
    "troubleshoot.Captured": RECORD,
    "runtime.collect": LAUNCHER_PART,
    "runtime.stop": LAUNCHER_PART,
    "runtime.stop_helpers": NO_INPUT,
    "core.DefaultsHelp": FORMATTER,
    "core.RawDefaultsHelp": FORMATTER,
    "bench.available": NO_INPUT,
    "core.gpu_count": NO_INPUT,
    "core.cpu_cores": NO_INPUT,
    "core.hardware_label": NO_INPUT,
    "core.cpu_label": NO_INPUT,
    "core.strict_fp32": NO_INPUT,
    "elastic.attempt": NO_INPUT,
    "elastic.free_port": NO_INPUT,
    "elastic.rng_state": NO_INPUT,
    "troubleshoot.free_port": NO_INPUT,
    "troubleshoot.interfaces": NO_INPUT,
    "troubleshoot.port_taken": NO_INPUT,
    "core.say": "prints its parts as one line: any object has a str, and file is any writable stream",
    "collectives.allreduce_torch": "torch's dist.all_reduce itself: torch's errors name a tensor that is not one and a missing process group",
    "collectives.averaged_step": "the step that train_worker builds (partial with its own all-reduce and seconds list); train_worker's rows check the user's values",
    "collectives.link_load": "takes the Steps that trace_allreduce/ring_trace record, never a user's values",
    "collectives.note": "called by the traced all-reduces inside a worker, with their own trace, step and tensor",
    "collectives.sendrecv": "the all-reduces' own point-to-point primitive, called with their tensors and ranks; a user's tensor enters through allreduce_* (rows 'allreduce_ring not a tensor')",
    "runtime.unwrap": "returns a model that no registered wrapper holds as it is: there is no wrong value, only nothing to unwrap",
    "internals.unused_error": "builds the error that the wrappers raise, from the names they found; never called with a user's values",
    "sharding.count_bytes": "takes no argument: a context manager that counts the collectives' bytes inside it",
    "sharding.waited": "takes the events that record_zero3_step returns, never a user's values",
    "study.find_breakeven": "takes the Parts that measure() returns, never a user's values",
    "study.breakeven_text": "words for the values find_breakeven() returns, never a user's",
    "core.number_of": "words for a count the package computed (a rank count, calls per step)",
    "study.plot_breakeven": "draws the Parts that measure() returns and the dict find_breakeven() makes of them",
    "study.plot_lr_scaling": "draws the Points that aggregate() returns (an empty list draws empty axes)",
    "study.plot_speedup": "draws the Points that aggregate() returns (an empty list draws empty axes)",
    "study.plot_study": "draws the Points that aggregate() returns (an empty list draws empty axes)",
    "study.plot_projection": "draws the Projections that project() returns (its rows check the inputs)",
    "study.speedups": "takes the Points that aggregate() builds; a point without a 1-device base gets none (NaN), by design",
    "study.table": "formats the Points that aggregate() returns (an empty list prints the header)",
    "study.init_weights_as_published": "applied by net.apply to every module: anything that is not a Linear or Conv2d is left as it is, by design",
    "study.run_reference": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_split": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_allreduce": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_dataparallel": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_ddp": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_internals": "takes a RunSpec, which checks its fields when it is built (rows study.RunSpec ...)",
    "study.run_processes": "launches a package worker with a RunSpec's fields, which RunSpec checks when it is built (rows study.RunSpec ...)",
    "elastic.download_race": "a worker that launch() starts with the chapter's own root and flag, never a user's values",
    "elastic.restarted_logs": "a demonstration with the chapter's step numbers; log_dir is checked where TensorBoard's writer opens it",
    "pictures.plot_allreduce": TRACE,
    "pictures.plot_eval_counts": "draws the counts that eval_counts() returns (its rows check n and world_size)",
    "pictures.plot_forward": TRACE,
    "pictures.plot_backward": TRACE,
    "pictures.plot_load": "draws the loads that rank_load() computes from the package's traces",
    "pictures.plot_orders": "draws the orders that record_orders() returns (its rows check n)",
    "pictures.plot_shards": "draws a DataPartitioner, which checks its sizes when built (rows DataPartitioner ...)",
    "pictures.plot_step": TRACE,
    "pictures.holdings": TRACE,
    "pictures.rank_load": TRACE,
    "pictures.row_labels": TRACE,
    "pictures.timeline": TRACE,
    "pictures.readers": "takes the shares a sampler yields (record_orders, eval_counts), never a user's values",
    "pictures.shard_of": "takes a DataPartitioner, which checks its sizes when built (rows DataPartitioner ...)",
    "pictures.rank_color": "any integer picks a colour (modulo the palette): nothing to get wrong",
    "pictures.text_color": "takes a colour that a matplotlib colormap returned, never a user's value",
    "troubleshoot.captured_stderr": "path is any file to write (or None); open()'s own error names a missing folder",
    "troubleshoot.matmul_seconds": "a worker that oversubscription() launches with its own checked size and repeats",
}

CLIS = {  # command line -> the module whose main (or parser) builds it
    "study": "companion.study.cli",
    "ddp": "companion.ddp.cli",
    "elastic": "companion.elastic.cli",
    "troubleshoot": "companion.troubleshoot.crash",
    **{
        f"bench {b}": f"companion_tools.bench.{b}"
        for b in [
            "allreduce",
            "baseline",
            "compression",
            "dataparallel",
            "ddp",
            "internals",
            "launch",
            "loop",
            "split",
        ]
    },
}
FLAG = "a flag (store_true): present or absent, no value to get wrong"
FREE_TEXT = "a path or name that the command only passes on; checked where it is used (rows of the function it reaches)"
# A table, one row per line: not reformatted.
# fmt: off
CLI_NO_ROW = {
    "study --no-progress": FLAG, "study --model": "passed to get_model, whose rows cover unknown names (get_model unknown)",
    "ddp --scale-lr": FLAG, "ddp --find-unused-parameters": FLAG, "ddp --channels-last": FLAG,
    "bench internals --sweep-model": "passed to get_bench_model, whose rows cover unknown names",
    "bench ddp --model": "passed to get_model (ddp --model vgg, get_model unknown)",
    "bench compression --model": "passed to get_model (ddp --model vgg, get_model unknown)",
    "bench internals --model": "passed to get_model (get_model unknown)",
    "bench baseline --model": "passed to get_model (get_model unknown)",
    "elastic --records": FREE_TEXT,
}
# fmt: on


def _public_callables() -> set[str]:
    """'package.name' of every public function and class; exception classes are raised, not called."""
    import importlib
    import inspect

    names = set()
    for package in PACKAGES:
        root = "companion_tools" if package in ("bench", "pictures") else "companion"  # tools
        module = importlib.import_module(f"{root}.{package}")
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                names.add(f"{package}.{name}")
    return names


def _cli_of(case_id: str) -> tuple[str, str] | None:
    """``(command line, option)`` that a row's id names, or None for a function's row."""
    words = case_id.replace(".cli ", " ").replace(" cli ", " ").split()
    for i, word in enumerate(words):
        if word.startswith("--") and " ".join(words[:i]) in CLIS:
            return " ".join(words[:i]), word
    return None


def _covered(public: set[str]) -> set[str]:
    by_name: dict[str, list[str]] = {}
    for full in public:
        by_name.setdefault(full.split(".", 1)[1], []).append(full)
    covered = set()
    for case in [*CASES, *SHARDING_CASES, *SLOWLINKS_CASES]:  # chapters 9, 10: tests/<package>/
        first = case[0].split()[0]
        if first in public:
            covered.add(first)
        elif len(by_name.get(first, [])) == 1:
            covered.add(by_name[first][0])
        if (cli := _cli_of(case[0])) and cli[0] in CLI_FUNCTIONS:
            covered.update(CLI_FUNCTIONS[cli[0]])
    return covered


def test_every_public_function_and_class_has_a_row_or_a_reason():
    public = _public_callables()
    covered = _covered(public)
    missing = sorted(public - covered - set(NO_ROW))
    assert not missing, (
        f"no bad-input row and no recorded reason for {missing}: add a row to CASES (its id "
        f"starting with 'package.name ') or a reason to NO_ROW"
    )
    stale = sorted(n for n in NO_ROW if n not in public or n in covered)
    assert not stale, f"remove {stale} from NO_ROW: they are not public, or have a row now"


def _parsers(clis=None) -> dict[str, "argparse.ArgumentParser"]:
    """Every command line's parser, as its main builds it (parse_args is stopped before any work)."""
    import importlib
    from unittest import mock

    class Built(Exception):
        pass

    parsers = {}
    for cli_name, module in (CLIS if clis is None else clis).items():

        def stop(parser, *args, **kwargs):
            parsers[cli_name] = parser
            raise Built

        with mock.patch.object(argparse.ArgumentParser, "parse_args", stop):
            with pytest.raises(Built):
                importlib.import_module(module).main([])
    return parsers


def test_every_command_line_option_has_a_row_or_a_reason():
    options = {
        f"{name} {action.option_strings[-1]}"
        for name, parser in _parsers().items()
        for action in parser._actions
        if action.option_strings and action.option_strings[0] not in ("-h", "--help")
    }
    covered = {" ".join(cli) for case in CASES if (cli := _cli_of(case[0]))}
    missing = sorted(options - covered - set(CLI_NO_ROW))
    assert not missing, (
        f"no bad-input row and no recorded reason for the options {missing}: add a row to CASES "
        f"(id '<command line> <option> <value>') or a reason to CLI_NO_ROW"
    )
    stale = sorted(o for o in CLI_NO_ROW if o not in options or o in covered)
    assert not stale, f"remove {stale} from CLI_NO_ROW: no such option, or it has a row now"


def test_every_help_shows_the_defaults():
    """Each option with a default (other than None / False: 'not given') says it in --help."""
    unshown = []
    for name, parser in _parsers().items():
        for action in parser._actions:
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                text = parser._get_formatter()._format_action(action)
                if "(default:" not in " ".join(text.split()):
                    unshown.append(f"{name} {action.option_strings[-1]}")
    assert not unshown, f"--help hides the defaults of {unshown}"


def test_a_resume_with_nothing_left_to_do_says_so(tmp_path):
    """A 2-epoch snapshot resumed with --epochs 1 or 2 trains nothing: main says why (and exits 0)."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = el.warmup_schedule(optimizer, 1)
    path = tmp_path / "s.pt"
    el.save_snapshot(
        el.make_snapshot(model, optimizer, scheduler, epoch=2, position=0, step=8, config={}), path
    )
    for epochs in (1, 2):
        said = el.cli.nothing_left(str(path), epochs)
        assert said == (
            f"nothing left to do: the snapshot {path} has trained 2 epoch(s) (step 8) and --epochs is "
            f"{epochs}; give --epochs above 2 to train on, or another --snapshot to start afresh"
        )
    assert el.cli.nothing_left(str(path), 3) == ""  # one more epoch to train
    assert el.cli.nothing_left(str(tmp_path / "none.pt"), 1) == ""  # no snapshot: a fresh run


def test_one_seed_prints_no_spread():
    point = dict(
        method="ddp",
        n_devices=1,
        global_batch=8,
        lr_rule="none",
        acc_mean=0.5,
        acc_std=0.0,
        acc_min=0.5,
        acc_max=0.5,
        sec_per_epoch=1.0,
        samples_per_sec=8.0,
        sec_min=1.0,
        sec_max=1.0,
        speedup=1.0,
        efficiency=1.0,
    )
    one, three = st.table([st.Point(seeds=1, **point)]), st.table([st.Point(seeds=3, **point)])
    assert "(0.000)" not in one and one.splitlines()[1].split()[6] == "-"
    assert three.splitlines()[1].split()[6] == "(0.000)"  # three seeds that agree: a spread of 0


def test_every_help_is_plain_text():
    """Issue 36: `--help` is read in a terminal, where reST markup (``x``, :func:`x`, ::)
    shows as noise."""
    import re

    every = {
        **CLIS,
        "bench record": "companion_tools.bench.record",
        "bench sharding": "companion_tools.bench.sharding",
    }
    marked = {
        name: re.findall(r"``|:[a-z]+:`|::$", parser.format_help(), re.M)
        for name, parser in _parsers(every).items()
    }
    assert not {name: found for name, found in marked.items() if found}
