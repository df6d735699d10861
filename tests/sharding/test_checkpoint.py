"""Sharded checkpoints: FSDP2's and the hand-written stages' model and Adam state saved by
N ranks load on M ranks (2->1, 1->2, 2->3, 3->4) with the parameters equal, and the next step
equal too (the moments and Adam's step count came along)."""

import os
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from companion.runtime import WorkerError, launch
from companion.sharding import snapshot
from companion.sharding.checkpoint import checkpoint_worker, last_saved, load_sharded

from .workers import LOADERS, partial_load_worker

pytestmark = pytest.mark.ch9


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(2)
    return torch.randn(9, 1, 28, 28, generator=g), torch.randint(0, 10, (9,), generator=g)


@pytest.mark.parametrize("method", ["FSDP2", "ZeRO-1", "ZeRO-2", "ZeRO-3"])
@pytest.mark.parametrize("saved_on, loaded_on", [(2, 1), (1, 2), (2, 3), (3, 4)])
def test_saved_on_n_ranks_loads_on_m(tmp_path, batch, method, saved_on, loaded_on):
    path = str(tmp_path / "ckpt")
    saved = launch(
        checkpoint_worker, saved_on, path, "save", *batch, 2, method, backend="gloo", timeout=240
    )
    loaded = launch(
        checkpoint_worker, loaded_on, path, "load", *batch, 2, method, backend="gloo", timeout=240
    )
    for got in loaded:
        torch.testing.assert_close(got["at checkpoint"], saved[0]["at checkpoint"], rtol=0, atol=0)
        torch.testing.assert_close(got["one step later"], saved[0]["one step later"])
    assert not torch.equal(saved[0]["at checkpoint"], saved[0]["one step later"])
    assert not (tmp_path / "ckpt.partial").exists()  # written aside, then put in place


def test_saving_again_replaces_the_checkpoint_whole(tmp_path, batch):
    path = str(tmp_path / "ckpt")
    first = launch(checkpoint_worker, 2, path, "save", *batch, 1, backend="gloo", timeout=240)
    second = launch(checkpoint_worker, 2, path, "save", *batch, 3, backend="gloo", timeout=240)
    loaded = launch(checkpoint_worker, 1, path, "load", *batch, backend="gloo", timeout=240)
    assert not torch.equal(first[0]["at checkpoint"], second[0]["at checkpoint"])
    torch.testing.assert_close(
        loaded[0]["at checkpoint"], second[0]["at checkpoint"], rtol=0, atol=0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_crash_between_the_two_renames_leaves_the_last_checkpoint_found(
    tmp_path, batch, monkeypatch
):
    """save_sharded moves ``path`` to ``path.old``, then ``path.partial`` to ``path``: after a
    crash between the two, the last checkpoint is found at ``path.old`` (the snapshot too),
    and the next save puts a whole one at ``path`` and removes the rest."""
    path = tmp_path / "ckpt"
    saved = launch(checkpoint_worker, 2, str(path), "save", *batch, 1, backend="gloo", timeout=240)
    assert last_saved(path) == path and last_saved(tmp_path / "none") is None
    os.replace(path, f"{path}.old")  # the first rename done; the crash comes before the second
    assert last_saved(path) == Path(f"{path}.old")
    found = str(last_saved(path))
    loaded = launch(checkpoint_worker, 1, found, "load", *batch, backend="gloo", timeout=240)
    assert_close(loaded[0]["at checkpoint"], saved[0]["at checkpoint"], rtol=0, atol=0)
    monkeypatch.setattr(snapshot, "load_extra", lambda p: {"read from": str(p)})
    monkeypatch.setattr(snapshot, "check_format", lambda s, p: s)
    assert snapshot.load_sharded_snapshot(path)["sharded"] == found
    again = launch(checkpoint_worker, 2, str(path), "save", *batch, 3, backend="gloo", timeout=240)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    loaded = launch(checkpoint_worker, 1, str(path), "load", *batch, backend="gloo", timeout=240)
    assert_close(loaded[0]["at checkpoint"], again[0]["at checkpoint"], rtol=0, atol=0)


def test_a_stage_refuses_a_checkpoint_of_other_layouts(tmp_path, batch):
    """ZeRO-3's units are not ZeRO-1's one flat buffer: loading says which to use."""
    path = str(tmp_path / "ckpt")
    launch(checkpoint_worker, 2, path, "save", *batch, 1, "ZeRO-3", backend="gloo", timeout=240)
    with pytest.raises(WorkerError, match="load it with the method, model and units"):
        launch(checkpoint_worker, 2, path, "load", *batch, 1, "ZeRO-1", backend="gloo", timeout=240)


def test_loading_from_a_folder_without_a_checkpoint_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no DCP checkpoint at .*save_sharded"):
        load_sharded(
            torch.nn.Linear(2, 2), torch.optim.SGD(torch.nn.Linear(2, 2).parameters()), tmp_path
        )


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["FSDP2", "ZeRO-1", "ZeRO-2", "ZeRO-3"])
def test_saved_on_a_gpu_loads_on_the_gpu_and_on_cpu_ranks(tmp_path, batch, method):
    """nccl reduces only GPU tensors: the counters and flags a stage gathers before saving
    live where its shards do. A GPU's checkpoint loads on the GPU and on 2 CPU ranks."""
    path = str(tmp_path / "ckpt")
    [saved] = launch(checkpoint_worker, 1, path, "save", *batch, 2, method, timeout=240)
    [again] = launch(checkpoint_worker, 1, path, "load", *batch, 2, method, timeout=240)
    on_cpu = launch(
        checkpoint_worker, 2, path, "load", *batch, 2, method, backend="gloo", timeout=240
    )
    for got in [again, *on_cpu]:
        torch.testing.assert_close(got["at checkpoint"], saved["at checkpoint"], rtol=0, atol=0)
    torch.testing.assert_close(again["one step later"], saved["one step later"])


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", LOADERS)
def test_a_checkpoint_never_loads_partly_and_a_resume_steps_a_late_parameter_afresh(
    tmp_path, method, world_size
):
    """Issue 54, items 4 and 5: a model renamed by a wrapper, one more layer (trainable or
    frozen) and another optimizer class are refused with the names (they loaded partly, in
    silence: nothing at all for the renamed model); a parameter without optimizer state in
    the checkpoint starts its Adam afresh, as in the run that was never interrupted."""
    results = launch(partial_load_worker, world_size, str(tmp_path), method, backend="gloo")
    for refused, resumed, whole in results:
        assert refused.keys() == {
            "wrapped in nn.Sequential",
            "one more layer",
            "one more frozen layer",
            "SGD with momentum",
        }
        assert all(said != "loaded" for said in refused.values()), refused
        assert "another optimizer" in refused["SGD with momentum"], refused
        assert "extra.weight" in refused["one more frozen layer"], refused
        if method.startswith("ZeRO"):  # renamed or added trainable: their flat layouts differ
            assert "flat layouts" in refused["wrapped in nn.Sequential"], refused
            assert "flat layouts" in refused["one more layer"], refused
        else:
            assert "0.a.weight" in refused["wrapped in nn.Sequential"], refused
            assert "extra.weight" in refused["one more layer"], refused
        assert_close(resumed, whole, rtol=0, atol=0)


DAMAGES = {
    "metadata corrupt": (".metadata", lambda f: f.write_bytes(b"not a pickle"), ".metadata"),
    "shard truncated": ("__0_0.distcp", lambda f: f.write_bytes(f.read_bytes()[:100]), "100 bytes"),
    "shard emptied": ("__1_0.distcp", lambda f: f.write_bytes(b""), "0 bytes"),
    "shard deleted": ("__1_0.distcp", lambda f: f.unlink(), "missing"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, batch):
    """FSDP2 and ZeRO-3 checkpoints saved by 2 ranks, to damage copies of."""
    root = tmp_path_factory.mktemp("saved")
    for method in ("FSDP2", "ZeRO-3"):
        path = str(root / method)
        launch(checkpoint_worker, 2, path, "save", *batch, 1, method, backend="gloo", timeout=240)
    return root


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", ["FSDP2", "ZeRO-3"])
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_is_refused_naming_the_file(
    tmp_path, saved, batch, damage, method, world_size
):
    """DCP's own error was ``CheckpointException ranks:dict_keys([0, 1])``, naming no file."""
    import shutil

    path = tmp_path / "ckpt"
    shutil.copytree(saved / method, path)
    name, spoil, says = DAMAGES[damage]
    spoil(path / name)
    with pytest.raises(WorkerError, match="is damaged") as err:
        launch(checkpoint_worker, world_size, str(path), "load", *batch, 1, method, timeout=240)
    assert name in str(err.value) and says in str(err.value)


@pytest.mark.parametrize("what", ["a file", "a folder with other files"])
def test_saving_over_what_is_not_a_checkpoint_is_refused_and_leaves_it(tmp_path, batch, what):
    path = tmp_path / "results"
    if what == "a file":
        path.write_text("keep me")
    else:
        path.mkdir()
        (path / "notes.txt").write_text("keep me")
    with pytest.raises(WorkerError, match="is not a checkpoint that save_sharded wrote"):
        launch(checkpoint_worker, 2, str(path), "save", *batch, 1, backend="gloo", timeout=240)
    kept = path if what == "a file" else path / "notes.txt"
    assert kept.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
