"""Inference methods by their command-line names."""

from slangcli.methods import slang

METHODS = {"slang": slang}
