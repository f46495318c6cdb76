"""``slang compress`` on runs: the k-tied compression (``slangcli.compress.ktied``) of a stored run's posterior as new runs,
with their provenance and, when asked, their scores."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from typing import Callable


from slangcli.compress import ktied as compression
from slangcli.data.readers import ARRAYS
from slangcli.data.readers import sha256_file
from slangcli.errors import ConfigError, DataError
from slangcli.gaussian.posteriors import is_mixture
from slangcli.predictive.evaluation import _scoring_data, check_finite, computing_with, score
from slangcli.runfile.io import POSTERIOR_NAMES, Run
from slangcli.runfile.provenance import meta


def parse_ranks(text) -> list[int]:
    """``"1,2,3" -> [1, 2, 3]``: positive whole numbers, each at most once, in the order given."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(f"--rank takes positive whole numbers separated by commas (e.g. 1,2,3), got {text!r}")
    ranks = [int(p) for p in parts]
    repeated = [k for i, k in enumerate(ranks) if k in ranks[:i]]
    if repeated:
        raise ConfigError(f"--rank {repeated[0]} is given twice")
    return ranks


def rank_outputs(output: str, ranks: list[int]) -> list[str]:
    """The file of each rank: ``output`` itself for one rank; for several, the rank before the extension
    (``out.h5`` -> ``out-k1.h5``, ``out-k2.h5``)."""
    if len(ranks) == 1:
        return [output]
    root, ext = os.path.splitext(output)
    return [f"{root}-k{k}{ext}" for k in ranks]


@dataclass
class Compressed:
    """One compressed posterior: its rank, where it goes, the run to write, each layer's compression (a mixture's
    member 0's; ``member_layers``, every member's) and, when asked, its scores (``predictive.evaluation.score``)."""

    rank: int
    path: str
    run: Run
    layers: list
    scores: dict | None = None
    member_layers: list | None = None

    @property
    def all_layers(self) -> list:
        """Every layer's compression, of every member of a mixture."""
        return [c for layers in (self.member_layers or [self.layers]) for c in layers]


def compressed_run(run: Run, k: int, source: dict, *, command: list | None = None, path: str | None = None
                   ) -> Compressed:
    """The run of ``run``'s posterior compressed to rank ``k`` (``slangcli.compress.ktied``); ``source`` describes the
    run it came from (``path``, ``sha256``, ``posterior``, ``method``). A mixture of posteriors (``--members``) is
    compressed member by member, into a mixture of k-tied members with the same noise and prior precisions: its
    summary's ``layers`` and spectra are member 0's, ``member_layers`` every member's, and member j's spectra
    (j >= 1) are named ``member<j>_singular_values_<l>``."""
    before = compression.n_variational_params(run.posterior)
    sources = run.posterior.members if is_mixture(run.posterior) else (run.posterior,)
    done = [compression.compress(member, run.model, k) for member in sources]
    posterior = (replace(run.posterior, members=tuple(ktied for ktied, _ in done)) if is_mixture(run.posterior)
                 else done[0][0])
    layers = done[0][1]
    summary = {
        "source": {key: source.get(key) for key in ("path", "sha256", "posterior", "method")},
        "rank": k, "floor_relative": compression.FLOOR_RELATIVE, "params_before": before,
        "params_after": compression.n_variational_params(posterior),
        "layers": [c.summary() for c in layers],
    }
    if is_mixture(run.posterior):
        summary["member_layers"] = [[c.summary() for c in member_layers] for _, member_layers in done]
    arrays = {}
    for j, (_, member_layers) in enumerate(done):
        prefix = f"member{j}_" if j else ""
        for l, c in enumerate(member_layers):
            arrays[f"{prefix}singular_values_{l}"] = c.singular_values
            arrays[f"{prefix}explained_variance_{l}"] = c.explained_variance
    # (a calibration's scores are those of the source's predictive, not of the compressed posterior's: not kept)
    new = replace(run, posterior=posterior, metrics={}, command=list(command or []), meta=meta(),
                  compression=summary, compression_arrays=arrays, status="complete", state=None, calibration={})
    return Compressed(rank=k, path=path, run=new, layers=layers,
                      member_layers=[member_layers for _, member_layers in done] if is_mixture(run.posterior) else None)


def check_finished(run: Run, name: str, path: str | None) -> None:
    """Refuse a checkpoint (a fit stopped part-way, named ``name``; ``path``: its run file, if any): its posterior is
    not the fit's, and it has no noise model yet."""
    if run.status == "checkpoint":
        raise DataError(f"{name}: a checkpoint of a fit stopped at step {run.metrics.get('steps', '?')}; finish it "
                        f"first (slang fit --resume {shlex.quote(path) if path else 'RUN.h5'}), then compress the "
                        "finished run")


def compress(run: Run, run_name: str, ranks: list[int], outputs: list[str], *, evaluate: bool = False,
             samples: int = 100, seed: int = 0, command: list | None = None,
             notify: Callable[[str], None] = lambda msg: None) -> tuple[dict, list[Compressed]]:
    """Compress the posterior of ``run`` (read from ``run_name``) to a k-tied posterior of each rank in ``ranks``
    (``slangcli.compress.ktied``), one run to be written to each of ``outputs``.

    With ``evaluate`` every compressed posterior, and the source's for comparison (``source["scores"]``), is scored
    on the run's test data and training -ELBO with ``samples`` weight samples; the same ``seed`` for all, so the
    comparison uses common random numbers. Nothing is written here: the caller writes all or nothing.
    """
    check_finished(run, run_name, run_name)
    if evaluate:
        _check_test_data(run, run_name)
    sha = sha256_file(run_name)
    before = compression.n_variational_params(run.posterior)
    limits = [min(m, n) for m, n in zip(run.model.sizes[:-1], run.model.sizes[1:])]
    for k in ranks:
        over = [f"layer {l + 1} ({m} x {n})" for l, (m, n) in enumerate(zip(run.model.sizes[:-1], run.model.sizes[1:]))
                if k > min(m, n)]
        if over:
            notify(f"--rank {k} exceeds min(m, n) of {', '.join(over)}: "
                   + ("it keeps its" if len(over) == 1 else "they keep their") + " full rank (exact reconstruction)")
    source = {"path": os.path.abspath(run_name), "sha256": sha, "posterior": POSTERIOR_NAMES[type(run.posterior)],
              "method": run.config.get("method"), "params": before, "layer_full_ranks": limits}
    with computing_with(run_name):
        results = [compressed_run(run, k, source, command=command, path=path) for k, path in zip(ranks, outputs)]
    for item in results:
        check_finite(_stored(item.run.posterior), "compressed posteriors", run_name)
    if evaluate:
        X_test, y_test, _, X_train, y_train, target_scale = _scoring_data(run, run_name, None, notify,
                                                                          "the -ELBO is not reported")

        def scores(posterior):
            return score(run.model, posterior, run.prior_precision, X_train=X_train, y_train=y_train, X_test=X_test,
                         y_test=y_test, target_scale=target_scale, samples=samples, seed=seed)

        with computing_with(run_name):
            source["scores"] = scores(run.posterior)
            for item in results:
                item.scores = scores(item.run.posterior)
                item.run.metrics = dict(item.scores, seed=seed)  # (the draws evaluate then defaults to)
        check_finite([source["scores"], *(item.scores for item in results)], "scores", run_name)
    return source, results


def _stored(posterior) -> dict:
    """Every array a posterior stores, a mixture's members' too."""
    out = dict(posterior.stored_arrays())
    for name, member in getattr(posterior, "stored_groups", dict)().items():
        out.update((f"{name}/{key}", value) for key, value in _stored(member).items())
    return out


def _check_test_data(run: Run, run_name: str) -> None:
    """Refuse ``--evaluate`` before any work when the run holds no test data it can re-read (compress takes no data
    file: the other ways to score are a refit with test data, or ``slang evaluate`` on the compressed file)."""
    test = run.data.get("test")
    if test is None:
        lacks = "the run has no test data"
    elif test.get("source") == ARRAYS:
        lacks = "its test data were arrays passed from Python"
    else:
        return
    raise ConfigError(f"{run_name}: {lacks}, and compress --evaluate scores on the run's own test data: fit with "
                    "--test FILE or --test-fraction F, or score a compressed file with slang evaluate OUT.h5 DATA")
