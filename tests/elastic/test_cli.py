"""python -m companion.elastic: chapter 5's options plus snapshots; bad options say what to do."""

import pytest

from companion.elastic import build_parser, main

pytestmark = pytest.mark.ch8


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: --snapshot"),
        (["--snapshot", "s.pt", "--snapshot-every", "0"], "must be a positive, finite int"),
        (["--snapshot", "s.pt", "--momentum", "1"], "--momentum in [0, 1)"),
        (["--snapshot", "s.pt", "--warmup-steps", "-1"], "--warmup-steps must be >= 0"),
        (["--snapshot", "s.pt", "--model", "vgg"], "unknown model 'vgg'"),
        (["--snapshot", "s.pt", "--scale-lr"], "unrecognized arguments: --scale-lr"),
        (["--snapshot", "s.pt"], "start this with torchrun"),
    ],
)
def test_bad_options_exit_with_a_clear_message(no_torchrun, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_directory_is_not_a_snapshot_file(no_torchrun, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["--snapshot", str(tmp_path)])
    assert "is a directory; give a file name" in capsys.readouterr().err


def test_help_names_the_torchrun_command_and_keeps_chapter_5s_options():
    text = build_parser().format_help()
    assert text.startswith(
        "usage: torchrun --nproc-per-node=N --max-restarts=K -m companion.elastic"
    )
    for option in (
        "--epochs",
        "--global-batch",
        "--lr",
        "--seed",
        "--snapshot",
        "--snapshot-every",
        "--warmup-steps",
        "--log-dir",
        "--records",
    ):
        assert option in text
