from spacy_crf.plots import finish_axes, pyplot, save_figure, subplots


def test_save_figure_writes_a_png_in_new_folders_and_closes_the_figure(tmp_path):
    fig, ax = subplots()
    ax.plot([0, 1], [0, 1], label="line")
    finish_axes(ax, "x", "y")
    path = save_figure(fig, tmp_path / "a" / "b" / "plot.png", title="two panels' title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ax.get_xlabel() == "x" and ax.get_legend() is not None
    assert fig._suptitle.get_text() == "two panels' title"
    assert fig.number not in pyplot().get_fignums()  # a report drawing many plots does not keep them
