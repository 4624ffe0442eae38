"""The Anatomy tab at a 300-px dock: the figure is laid out at its narrowest width (300 px), wider
than the scroll area's viewport there, so a horizontal scroll bar reaches its right edge (W_V's
caption and the cost table's last column can be scrolled to)."""

from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy as fig
from attnviz.ui.machinery.state import AppState
from attnviz.ui.panels.anatomy_panel import AnatomyPanel


def test_a_figure_wider_than_a_narrow_dock_scrolls_sideways_to_its_right_edge(qtbot, minilm):
    panel = AnatomyPanel(AppState())
    qtbot.addWidget(panel)
    panel.resize(300, 700)
    panel.show()
    r = minilm.run("The keys to the cabinet are on the table.", request=RunRequest(inputs=True))
    panel.canvas.set_view(fig.make_anatomy_view(minilm, r, 3, 1))
    lay, scroll = panel.canvas.lay, panel.scroll
    qtbot.waitUntil(lambda: scroll.horizontalScrollBar().isVisible())
    bar = scroll.horizontalScrollBar()
    assert scroll.viewport().width() < lay.width == fig.MIN_WIDTH
    assert panel.canvas.width() >= lay.width  # the canvas holds the whole figure
    bar.setValue(bar.maximum())  # scrolled to the right: the figure's right edge is on screen
    right = panel.canvas.mapTo(scroll.viewport(), panel.canvas.rect().topLeft()).x() + lay.width
    assert right <= scroll.viewport().width()
