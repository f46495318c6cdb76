"""Figures: the data of each figure (plotdata) and their drawing with matplotlib (figures)."""
