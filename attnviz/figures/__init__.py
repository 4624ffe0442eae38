"""Figures and exports without widgets: the heatmap and anatomy figures painted with QPainter
(PNG, SVG), the numbers behind them (NPY, CSV, JSON), their sidecars and the one transactional
writer. The command line uses this package and the engine; it never imports attnviz.ui."""
