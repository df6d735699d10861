"""The command line of companion.ddp: bad options and a missing torchrun give clear errors, fast
(in-process; the real torchrun runs are in test_torchrun.py)."""

import pytest

from companion.ddp import build_parser, main

pytestmark = pytest.mark.ch5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "argument --epochs: must be a positive, finite int, got '0'"),
        (["--lr", "-1"], "argument --lr: must be a positive, finite float, got '-1'"),
        (["--lr", "fast"], "argument --lr: must be a positive, finite float, got 'fast'"),
        (["--lr", "inf"], "argument --lr: must be a positive, finite float, got 'inf'"),
        (["--lr", "nan"], "argument --lr: must be a positive, finite float, got 'nan'"),
        (["--timeout", "0"], "argument --timeout: must be a positive, finite float, got '0'"),
        (["--global-batch", "64", "--per-rank-batch", "32"], "not allowed with argument"),
        (["--profile", "laptop"], "unknown profile 'laptop'; valid profiles are"),
        (["--model", "vgg"], "unknown model 'vgg'"),
        (["--backend", "mpi"], "invalid choice: 'mpi'"),
    ],
)
def test_bad_options_exit_with_a_clear_message(no_torchrun, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_options_that_depend_on_the_world_size_and_the_paths(
    no_torchrun, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("WORLD_SIZE", "2")
    (tmp_path / "afile").write_text("")
    for argv, message in (
        (["--global-batch", "63"], "choose a multiple of 2, e.g. 62"),
        (["--checkpoint", str(tmp_path)], "is a directory; give a file name"),
        (["--log-dir", str(tmp_path / "afile")], "is a file; give a directory"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


def test_without_torchrun_it_says_how_to_start_it(no_torchrun, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--profile", "ci"])
    assert exit_info.value.code == 2
    assert (
        "start this with torchrun, e.g. torchrun --standalone --nproc-per-node=2"
        in capsys.readouterr().err
    )


def test_help_names_the_torchrun_command():
    text = build_parser().format_help()
    assert text.startswith("usage: torchrun --standalone --nproc-per-node=N -m companion.ddp")
    for option in (
        "--epochs",
        "--global-batch",
        "--per-rank-batch",
        "--lr",
        "--scale-lr",
        "--log-dir",
        "--checkpoint",
        "--profile",
    ):
        assert option in text


def test_find_unused_parameters_reaches_train_ddp(no_torchrun, monkeypatch, capsys):
    import types

    import torch.distributed as dist

    from companion.ddp import cli

    def one_process_group(*args):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        return True

    seen = {}
    monkeypatch.setattr(cli, "init_from_env", one_process_group)
    monkeypatch.setattr(cli, "load_data", lambda *a, **k: None)
    monkeypatch.setattr(cli, "summarize", lambda records: "summary")
    monkeypatch.setattr(
        cli,
        "train_ddp",
        lambda data, profile, **o: seen.update(o) or types.SimpleNamespace(records=[]),
    )
    for argv, flag in ((["--find-unused-parameters"], True), ([], False)):
        assert main(["--profile", "ci", *argv]) == 0
        assert seen["find_unused_parameters"] is flag and not dist.is_initialized()
    assert "--find-unused-parameters" in build_parser().format_help()


def test_when_rank_0_cannot_load_the_data_every_rank_stops_with_the_reason():
    """Rank 0 loads first; the others learn of its failure at once, with its reason, instead
    of waiting at a barrier until the group's timeout (or a broken connection) ends it."""
    import time

    from companion.runtime import launch

    from .workers import load_rank0_first_worker

    ok = launch(load_rank0_first_worker, 2, "mnist-sample", backend="gloo", timeout=120)
    assert all(name.startswith("MNIST offline sample") for name in ok)
    start = time.monotonic()
    failed = launch(load_rank0_first_worker, 3, "cifar", backend="gloo", timeout=120)
    assert time.monotonic() - start < 60
    assert failed[0].startswith("ValueError: unknown data set 'cifar'")
    for other in failed[1:]:
        assert other.startswith("RuntimeError: rank 0 could not load the data (ValueError: ")
        assert other.endswith("fix that and start again")
