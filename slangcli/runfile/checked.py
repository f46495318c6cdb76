"""The consistency of a run file's parts, once each is read: what the data provenance promises is there, with the
model's shapes and the types the commands use; the split's row indices; a complete run's scores.

``slangcli.runfile.io``'s reader reads each part and checks its form (types, shapes, finite values); it then hands
the parts to :class:`RunChecks`, which checks them against each other and the model. Every problem goes to the
reader's ``fail``: a one-line ``FormatError`` naming the file.
"""

from __future__ import annotations

import numpy as np

from slangcli.data.prepare import LabelMap
from slangcli.data.readers import ARRAYS
from slangcli.data.schema import check_record
from slangcli.declare import MAX_SEED
from slangcli.errors import DataError


# the split-conformal scores of /calibration by task (slangcli.predictive.conformal computes them)
CALIBRATION_SCORES = {"regression": "abs_residual_over_std_total",
                      "classification": "one_minus_true_class_probability"}


class RunChecks:
    """The checks between the parts of one run file; ``fail(message)`` raises the reader's error."""

    def __init__(self, fail):
        self.fail = fail

    def require(self, obj, key: str, test, what: str, where: str):
        """``obj[key]``, which must exist and pass ``test``; ``what`` describes it in the message."""
        if not (isinstance(obj, dict) and key in obj and test(obj[key])):
            self.fail(f"{where} lacks {key!r} ({what})")
        return obj[key]

    def data(self, data, arrays, model) -> None:
        """What the provenance promises must be there, with the model's shapes and the types the commands use."""
        rows = self._train(data)
        self._scaling(data, arrays, model)
        if model.likelihood != "gaussian":
            self._label_classes(data, model)
        self.indices(data, arrays, rows)
        self._test(data, arrays)

    def _train(self, data) -> int:
        """The training data's provenance (where it was read from, its digest, its counts); its row count."""
        if not isinstance(data.get("options"), dict) or not isinstance(data.get("train"), dict):
            self.fail("/data provenance lacks 'train' or 'options'")
        train = data["train"]
        self.require(train, "format", _is_str, "a string", "/data provenance 'train'")
        # a run fitted to arrays from Python has no data file (format "arrays", path null)
        from_arrays = train["format"] == ARRAYS
        if not from_arrays:
            self.require(data["options"], "path", _is_str, "the data path", "/data provenance 'options'")
        for key in ("sha256",) if from_arrays else ("path", "sha256"):
            self.require(train, key, _is_str, "a string", "/data provenance 'train'")
        rows = self.require(train, "rows", _is_count, "a row count", "/data provenance 'train'")
        self.require(train, "features", _is_count, "a feature count", "/data provenance 'train'")
        if train["format"] == "uci":
            self.require(train, "folder", _is_str, "the UCI folder", "/data provenance 'train'")
        if not isinstance(data.get("feature_names", []), list):
            self.fail("/data provenance 'feature_names' is not a list")
        return rows

    def _scaling(self, data, arrays, model) -> None:
        """The data schema against the model's inputs, and the standardisation of the features and of a regression's
        targets: the arrays there when the run uses them, of the model's shapes, the scales positive."""
        P = model.sizes[0]
        if "schema" in data:
            try:
                check_record(data["schema"], P)
            except DataError as exc:
                self.fail(f"/data/schema {exc}")
            if data["schema"]["standardize"] != bool(data.get("standardize")):
                self.fail("/data/schema and the provenance differ on whether the features are standardised")
        if data.get("standardize"):
            for name in ("feature_mean", "feature_scale"):
                if name not in arrays or arrays[name].shape != (P,):
                    self.fail(f"/data/{name} must be present with shape ({P},) (the run standardises features)")
        if model.likelihood == "gaussian":
            for name in ("target_mean", "target_scale"):
                if name not in arrays or arrays[name].shape != (1,):
                    self.fail(f"/data/{name} must be present with shape (1,) (regression run)")
        # evaluate applies these whenever they are present
        for name, shape in (("feature_mean", (P,)), ("feature_scale", (P,)), ("target_mean", (1,)),
                            ("target_scale", (1,))):
            if name in arrays and arrays[name].shape != shape:
                self.fail(f"/data/{name} has shape {arrays[name].shape}, expected {shape}")
            if name.endswith("scale") and name in arrays and not (arrays[name] > 0).all():
                self.fail(f"/data/{name} must be positive")

    def _label_classes(self, data, model) -> None:
        """A classification run's label classes: distinct, as many as the model has classes."""
        if not (isinstance(data.get("labels"), dict) and isinstance(data["labels"].get("classes"), list)):
            self.fail("/data provenance lacks the label classes of a classification run")
        classes = data["labels"]["classes"]
        try:
            LabelMap(tuple(classes))
        except DataError as exc:
            self.fail(f"/data provenance: {exc}")
        n_classes = 2 if model.likelihood == "bernoulli" else model.sizes[-1]
        if len(classes) != n_classes:
            self.fail(f"/data provenance lists {len(classes)} label classes, the {model.likelihood} model has "
                      f"{n_classes}")

    def _test(self, data, arrays) -> None:
        """The test set's provenance, if the run has one: a file (path, digest, counts), arrays from Python (a
        digest), or a split of the training data (its test index and how the split was made)."""
        test = data.get("test")
        if test is None:
            return
        source = self.require(test, "source", lambda s: s in ("file", "split", ARRAYS), "'file', 'split' or 'arrays'",
                              "/data provenance 'test'")
        self.require(test, "rows", _is_count, "a row count", "/data provenance 'test'")
        if source == ARRAYS:
            self.require(test, "sha256", _is_str, "a string", "/data provenance 'test'")
            return
        if source == "file":
            for key in ("path", "sha256"):
                self.require(test, key, _is_str, "a string", "/data provenance 'test'")
            self.require(test, "features", _is_count, "a feature count", "/data provenance 'test'")
            return
        if "test_index" not in arrays:
            self.fail("/data/test_index is missing (the run's test set is a split of its training data)")
        if "uci_split" not in test and not ("test_fraction" in test and "split_seed" in test):
            self.fail("/data provenance 'test' lacks 'uci_split', or 'test_fraction' and 'split_seed'")

    def indices(self, data, arrays, rows: int) -> None:
        """The split's row indices: each lists distinct rows of the training data, the two share none (``evaluate``
        scores the test rows and the training -ELBO on the training rows: a row in both would be scored as data the
        fit never saw), and they are there exactly when the test set is a split, with the recorded row counts."""
        found = {}
        for name in ("train_index", "test_index"):
            index = arrays.get(name)
            if index is None:
                continue
            if (index.ndim != 1 or index.dtype.kind not in "iu" or index.size == 0 or index.min() < 0
                    or index.max() >= rows):
                self.fail(f"/data/{name} must list rows of the training data (integers from 0 to {rows - 1})")
            ordered = np.sort(index)
            repeated = ordered[1:][ordered[1:] == ordered[:-1]]
            if repeated.size:
                self.fail(f"/data/{name} lists row {int(repeated[0])} more than once (each row of a split is used "
                          "once)")
            found[name] = index
        test = data.get("test")
        split = isinstance(test, dict) and test.get("source") == "split"
        if not found:
            return  # (a split without its test index is refused with the test provenance)
        if not split:
            self.fail(f"/data/{next(iter(found))} is present, but the run's test set is not a split of its training "
                      "data")
        for name in ("train_index", "test_index"):
            if name not in found:
                self.fail(f"/data/{name} is missing (the run's test set is a split of its training data)")
        shared = np.intersect1d(found["train_index"], found["test_index"])
        if shared.size:
            self.fail(f"/data/train_index and /data/test_index share {shared.size} row(s) (the first: row "
                      f"{int(shared[0])}); a split's test rows must not be trained on")
        for name, source, key in (("train_index", data["train"], "rows_used"), ("test_index", test, "rows")):
            count = source.get(key)
            if _is_count(count) and count != found[name].size:
                where = "'train' 'rows_used'" if key == "rows_used" else "'test' 'rows'"
                self.fail(f"/data/{name} lists {found[name].size} rows, but the provenance {where} is {count}")

    def calibration(self, calibration, data, arrays, model) -> None:
        """``/calibration`` (1.5) against the run: the score of the model's task, how it was computed, the scores
        sorted (and within [0, 1] for a classifier), and the held-out rows: distinct rows of the training data that the
        fit neither trained nor was tested on."""
        where = "/calibration attribute 'summary'"
        task = "regression" if model.likelihood == "gaussian" else "classification"
        self.require(calibration, "score", lambda v: v == CALIBRATION_SCORES[task],
                     f"the score of a {task}, {CALIBRATION_SCORES[task]!r}", where)
        self.require(calibration, "fraction", lambda v: _is_number(v) and 0 < v < 1, "a fraction between 0 and 1",
                     where)
        self.require(calibration, "seed", _is_count, "the fit's seed", where)
        predictive = self.require(calibration, "predictive", lambda v: v in ("mc", "quadrature"),
                                  "'mc' or 'quadrature'", where)
        if predictive == "mc":
            self.require(calibration, "samples", lambda v: _is_count(v) and v >= 1, "the weight samples", where)
        scores, index, n = calibration["scores"], calibration["index"], calibration["n"]
        if (np.diff(scores) < 0).any() or scores[0] < 0 or (task == "classification" and scores[-1] > 1):
            self.fail("/calibration/scores must be sorted ascending, from 0" + (" to 1" if task == "classification"
                                                                                  else ""))
        rows = data["train"]["rows"]
        if index.dtype.kind not in "iu" or index.min() < 0 or index.max() >= rows or np.unique(index).size != n:
            self.fail(f"/calibration/index must list {n} distinct rows of the training data (integers from 0 to "
                      f"{rows - 1})")
        for name in ("train_index", "test_index"):
            if name in arrays:
                shared = np.intersect1d(index, arrays[name])
                if shared.size:
                    self.fail(f"/calibration/index and /data/{name} share {shared.size} row(s) (the first: row "
                              f"{int(shared[0])}); the calibration rows are held out of the fit")
        used = data["train"].get("rows_used")
        if "train_index" not in arrays and _is_count(used) and used + n != rows:
            self.fail(f"/calibration/index lists {n} rows and the provenance 'train' 'rows_used' is {used}, but the "
                      f"training data have {rows} rows (the fit trains on the rows not held out)")

    def members(self, config, posterior, state) -> None:
        """A mixture's count of members against the fit's (``config`` ``members``, 1.5; 1 when absent): a complete
        run holds them all, a checkpoint of a fit of several members those done and the one in progress (its
        ``/state`` attribute ``member``, counted from 0)."""
        K = config.get("members", 1)
        if not (_is_count(K) and K >= 1):
            self.fail(f"/ attribute 'config' 'members' must be a whole number >= 1, got {K!r}")
        expected, checkpoint = K, state is not None and K > 1
        if checkpoint:
            k = state["scalars"].get("member")
            if not (isinstance(k, int) and 0 <= k < K):
                self.fail(f"/state attribute 'member' must be the member in progress, from 0 to {K - 1}, got {k!r}")
            expected = k + 1
        count = getattr(posterior, "n_members", None)
        if count is None and expected > 1:
            self.fail(f"/posterior is a single {posterior.encoding} posterior, but / attribute 'config' says "
                      f"{K} members")
        if count is not None and count != expected:
            if checkpoint:
                self.fail(f"/posterior is a mixture of {count} members, but the checkpoint is at member "
                          f"{expected} of {K} (it holds members 1 to {expected})")
            self.fail(f"/posterior is a mixture of {count} members, but / attribute 'config' 'members' says {K}")

    def draws(self, config) -> None:
        """The fit's seed and its scoring's Monte-Carlo samples, from which evaluate and predict draw by default
        (``slangcli.predictive.evaluation.fit_draws``): whole numbers in range where present."""
        seed, samples = config.get("seed", 0), config.get("eval_samples", 1)
        if not (_is_count(seed) and seed <= MAX_SEED):
            self.fail(f"/ attribute 'config' 'seed' must be a whole number from 0 to 2**63 - 1, got {seed!r}")
        if not (_is_count(samples) and samples >= 1):
            self.fail(f"/ attribute 'config' 'eval_samples' must be a whole number >= 1, got {samples!r}")

    def metrics(self, metrics) -> None:
        """A complete run's scores: the training -ELBO per example, and the test scores of its likelihood."""
        where = "/metrics attribute 'metrics'"
        self.require(metrics, "train", lambda t: isinstance(t, dict) and _is_number(t.get("neg_elbo_per_example")),
                     "the training -ELBO per example", where)
        if "test" in metrics:
            test = metrics["test"]
            keys = ("rmse", "loglik") if isinstance(test, dict) and "rmse" in test else ("nll", "accuracy")
            if not (isinstance(test, dict) and all(_is_number(test.get(key)) for key in keys)):
                self.fail(f"{where} 'test' lacks {keys[0]!r} or {keys[1]!r} (numbers)")


def _is_str(value) -> bool:
    return isinstance(value, str)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
