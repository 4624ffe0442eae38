"""The window's side panels (Calculator, Head roles with Find, Anatomy, the training steps): each a
view of AppState, built by the window after its first heatmaps."""
