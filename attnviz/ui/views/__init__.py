"""The main window's views of the state: the heatmap grid and its arithmetic, the focus view, the token strip, the view controls, the guide bar, the notices, the long view."""
