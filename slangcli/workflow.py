"""The library functions behind the commands, in one namespace: data files -> prepared arrays -> fitted run ->
scores, predictions and compressions.

The command-line layer parses options into :class:`DataOptions` and keyword arguments and calls these; each lives
in the module of its concern:

- ``slangcli.sources``: :class:`DataOptions`, reading data files for a fit (:func:`load_training`, which fits the
  data schema: :func:`fit_schema`, :func:`with_target`) and a stored run's data (:func:`load_test`,
  :func:`load_train`, :func:`load_inputs`, :func:`transform`);
- ``slangcli.prepare``: label coding, splits, standardisation of arrays (:func:`prepare`);
- ``slangcli.options``: :class:`FitOptions`, the fit's options declared and checked once;
- ``slangcli.fitting``: :func:`fit`, :func:`fit_prepared`, :func:`resume`;
- ``slangcli.checkpoints``: :class:`Checkpointing` (when a fit writes a resumable snapshot of itself);
- ``slangcli.restarts``: :func:`restart_seed` (the seed of each of ``--restarts``);
- ``slangcli.evaluation``: :func:`score`, :func:`evaluate`, :func:`compare`, and the one predictive
  (:func:`predict`, :func:`predict_arrays`);
- ``slangcli.compression``: :func:`compress` on runs;
- ``slangcli.provenance``: :func:`versions`, :func:`meta`.

Everything here works without click or rich (progress and notes arrive as callbacks).
"""

from slangcli.compression import Compressed, compress, compressed_run, parse_ranks, rank_outputs
from slangcli.checkpoints import Checkpointing
from slangcli.evaluation import Predictions, check_comparable, compare, evaluate, predict, predict_arrays, score
from slangcli.fitting import fit, fit_prepared, resume
from slangcli.options import FitOptions, default_method, parse_hidden
from slangcli.prepare import Prepared, choose_likelihood, prepare
from slangcli.provenance import meta, versions
from slangcli.restarts import restart_seed
from slangcli.sources import (DataOptions, fit_schema, load_inputs, load_test, load_train, load_training, transform,
                              with_target)

__all__ = [
    "Checkpointing", "Compressed", "DataOptions", "FitOptions", "Predictions", "Prepared", "check_comparable",
    "choose_likelihood", "compare", "compress", "compressed_run", "default_method", "evaluate", "fit",
    "fit_prepared", "load_inputs", "load_test", "load_train", "load_training", "meta", "parse_hidden",
    "parse_ranks", "predict", "predict_arrays", "prepare", "rank_outputs", "resume", "restart_seed", "score",
    "transform", "versions", "fit_schema", "with_target",
]
