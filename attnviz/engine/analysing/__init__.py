"""Analysing a run: head scores, probes, Find, samples, the anatomy, prediction, ablation, effects, corpus statistics. No Qt."""
