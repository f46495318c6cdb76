"""Run files: the HDF5 format, atomic outputs, provenance and the checks between a stored run and what a later command
is given."""
