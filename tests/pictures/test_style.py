"""The pictures' shared style: figures are refused when wider than the page."""

import matplotlib
import pytest

from companion_tools.pictures import MAX_WIDTH, figure, rank_color, text_color

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.ch2


def test_figure_refuses_a_width_past_the_page():
    fig, _ = figure(MAX_WIDTH, 2)
    assert fig.get_size_inches()[0] * fig.dpi <= 900
    plt.close(fig)
    with pytest.raises(ValueError, match="900 pixels"):
        figure(MAX_WIDTH + 1, 2)


def test_colours():
    assert rank_color(0) != rank_color(1) and rank_color(0) == rank_color(8)
    assert text_color((1, 1, 1)) == "black" and text_color((0, 0, 0.3)) == "white"
