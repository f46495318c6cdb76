"""Gaussian posteriors: the low-rank-plus-diagonal algebra, the posterior kinds, divergences between them, the
quadratures of their predictives and the fast standard normal draws."""
