"""Data in: the readers of each file format, the columns of data given to a stored run, the preparation of arrays
(label coding, splits, standardisation), the sources of a fit's data and what it is about."""
