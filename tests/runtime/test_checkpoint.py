"""Checkpoints: unwrapped keys, round trips, and atomic writes that survive a crash mid-write."""

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import companion.runtime.checkpoint as checkpoint_module
from companion.core import get_model
from companion.runtime import load_checkpoint, save_checkpoint, unwrap

pytestmark = pytest.mark.ch5


def flat(net: nn.Module) -> torch.Tensor:
    return torch.cat(
        [p.detach().reshape(-1).cpu() for p in net.parameters()]
    )  # DataParallel may be on cuda:0


def test_a_wrapped_model_is_saved_unwrapped_and_loads_into_plain_and_wrapped_models(tmp_path):
    torch.manual_seed(0)
    trained = nn.DataParallel(get_model("lenet"))  # saves like DDP: the module inside
    assert unwrap(trained) is trained.module and unwrap(trained.module) is trained.module
    path = save_checkpoint(trained, tmp_path / "sub" / "model.pt")  # the directory is created
    assert not any(k.startswith("module.") for k in torch.load(path, weights_only=True))
    plain = load_checkpoint(get_model("lenet"), path)
    wrapped = load_checkpoint(nn.DataParallel(get_model("lenet")), path)
    assert torch.equal(flat(plain), flat(trained)) and torch.equal(flat(wrapped), flat(trained))


def test_a_crash_mid_write_leaves_the_old_checkpoint_whole_and_no_temporary_file(
    tmp_path, monkeypatch
):
    path = tmp_path / "model.pt"
    save_checkpoint(get_model("lenet"), path)
    old = path.read_bytes()

    def crash(obj, f):
        f.write(b"half a checkpoint")  # some bytes reach the disk, then the writer fails
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(get_model("lenet"), path)
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_a_writer_killed_mid_write_leaves_the_old_checkpoint_and_the_next_save_cleans_up(tmp_path):
    path = tmp_path / "model.pt"
    first = get_model("lenet")
    save_checkpoint(first, path)
    old = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        import companion.runtime.checkpoint as ck
        from companion.core.models import get_model
        def killed(obj, f):
            f.write(b"half a checkpoint"); f.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # no chance to clean up
        ck.torch.save = killed  # what atomic_write's callback calls
        ck.save_checkpoint(get_model("lenet"), {str(path)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9
    assert path.read_bytes() == old and load_checkpoint(get_model("lenet"), path) is not None
    stale = [p.name for p in tmp_path.iterdir() if p.name != "model.pt"]
    assert len(stale) == 1 and stale[0].startswith(".model.pt.") and stale[0].endswith(".tmp")
    save_checkpoint(first, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_bad_paths_say_what_to_do(tmp_path):
    with pytest.raises(IsADirectoryError, match="give a file name"):
        save_checkpoint(get_model("lenet"), tmp_path)
    with pytest.raises(FileNotFoundError, match="train with checkpoint="):
        load_checkpoint(get_model("lenet"), tmp_path / "missing.pt")


def test_a_path_under_a_regular_file_is_refused_before_writing(tmp_path):
    (tmp_path / "notes.txt").write_text("a file, not a directory")
    with pytest.raises(NotADirectoryError, match="notes.txt"):
        save_checkpoint(get_model("lenet"), tmp_path / "notes.txt" / "model.pt")
    assert (tmp_path / "notes.txt").read_text() == "a file, not a directory"


def _whole(tmp_path):
    return save_checkpoint(get_model("lenet"), tmp_path / "whole.pt").read_bytes()


@pytest.mark.parametrize(
    "content, message",
    [
        (
            lambda t: b"",
            r"empty\.pt is not a readable checkpoint.*save it again with save_checkpoint",
        ),
        (lambda t: _whole(t)[: len(_whole(t)) // 2], r"is not a readable checkpoint.*truncated"),
        (lambda t: bytes(range(256)) * 64, r"is not a readable checkpoint"),
    ],
    ids=["empty", "truncated", "random bytes"],
)
def test_files_that_are_not_checkpoints_raise_checkpoint_error(tmp_path, content, message):
    from companion.runtime import CheckpointError

    path = tmp_path / "empty.pt"
    path.write_bytes(content(tmp_path))
    net = get_model("lenet")
    before = flat(net).clone()
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(net, path)
    assert torch.equal(flat(net), before)  # nothing half-loaded


def test_a_checkpoint_of_another_model_or_not_a_state_dict_raises_checkpoint_error(tmp_path):
    from companion.runtime import CheckpointError

    other = save_checkpoint(get_model("convnet"), tmp_path / "convnet.pt")
    with pytest.raises(
        CheckpointError, match=r"does not fit this Sequential.*Build the same model"
    ):
        load_checkpoint(get_model("lenet"), other)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match=r"holds a list, not a model's state dict"):
        load_checkpoint(get_model("lenet"), tmp_path / "list.pt")
