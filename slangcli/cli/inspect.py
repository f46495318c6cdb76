"""``slang inspect``: what a run file holds."""

from __future__ import annotations

import dataclasses
import shlex

import click
import numpy as np
from rich.text import Text

from slangcli.data.readers import data_read_once
from slangcli.cli.output import Command, emit_json, needs_stdout, stderr
from slangcli.methods.exact import closed_form
from slangcli.predictive import conformal
from slangcli.runfile.io import POSTERIOR_NAMES, read_run


def _shape(value):
    """A field's shape; per-layer tuples of arrays (the k-tied ``U``, ``V``) as a list of shapes."""
    if isinstance(value, tuple) and all(isinstance(v, np.ndarray) for v in value):
        return [list(v.shape) for v in value]
    return list(np.shape(value))


def _posterior(post) -> dict:
    """A posterior's kind (its encoding-type), parameter count and array shapes; a mixture's members each so."""
    members = getattr(post, "members", None)
    arrays = {f.name: _shape(getattr(post, f.name)) for f in dataclasses.fields(post)
              if f.name not in ("sizes", "members")}
    out = {"type": POSTERIOR_NAMES[type(post)], "n_params": int(post.mean.size), "arrays": arrays}
    if members is not None:
        out["members"] = [_posterior(m) for m in members]
        out["noise_precision"] = [float(v) for v in post.noise_precision]
    return out


def summary(run, path) -> dict:
    hist = run.history
    return {
        "file": path,
        "slang_version": run.meta["slang_version"],
        "created": run.meta["created"],
        "command": run.command,
        "method": run.config.get("method"),
        "posterior": _posterior(run.posterior),
        "model": {"sizes": list(run.model.sizes), "activation": run.model.activation,
                  "likelihood": run.model.likelihood,
                  **({"noise_weights": list(run.model.noise_weights)} if run.model.noise_weights is not None
                     else {})},
        "config": run.config,
        "data": {k: v for k, v in run.data.items() if k != "feature_names"},
        "n_features": len(run.data.get("feature_names", [])),
        # (epochs of a step method, iterations of a solver; null for the other: a step method's "iterations: 0"
        # read as a fit that had not run)
        "history": {"epochs": int(len(hist["epoch"])) if "epoch" in hist else None,
                    "final_nll": float(hist["nll"][-1]) if len(hist.get("nll", [])) else None,
                    "iterations": int(len(hist["iteration"])) if "iteration" in hist else None,
                    "snr_records": int(len(hist.get("snr_step", [])))},
        "metrics": run.metrics,
        "status": run.status,
        "versions": run.meta["versions"],
        "environment": run.meta.get("environment"),
        "resumed": run.meta.get("resumed", []),
        "compression": run.compression or None,
        "calibration": _calibration(run.calibration),
    }


def _solved(solver: dict) -> str:
    """How an exact solver's posterior was found: in closed form (a linear regression), or by L-BFGS."""
    rounds = solver.get("prior_rounds")
    learned = (f"; {rounds} rounds of learned precisions" + ("" if solver.get("settled", True) else ", not settled")
               if rounds else "")
    if closed_form(solver):
        return f"training   solved in closed form{learned}"
    return (f"training   solved by L-BFGS: {solver['iterations']} iterations, largest gradient component "
            f"{solver['grad_max']:.2g} (tol {solver['tol']:g}){learned}")


def _calibration(calibration: dict) -> dict | None:
    """A calibrated run's calibration (``slang fit --calibrate``) without its arrays, with the quantiles of the
    levels evaluate reports (None: infinite)."""
    if not calibration:
        return None
    quantiles = {f"{c:g}": conformal.quantile(calibration["scores"], c) for c in conformal.CALIBRATED_LEVELS}
    return {**{k: v for k, v in calibration.items() if k not in ("scores", "index")},
            "quantiles": {k: None if np.isinf(q) else q for k, q in quantiles.items()}}


# the nonconformity scores in words
_SCORE_TEXT = {conformal.SCORES["regression"]: "|y - mean| / std_total",
               conformal.SCORES["classification"]: "1 - p(true class)"}


def _noise_model_text(model: dict) -> str:
    if len(model["noise_weights"]) == model["sizes"][0] + 2:
        return ", noise precision log-linear in the features and the output (--noise-model linear)"
    return ", noise precision log-linear in the features, the last hidden layer and the output (--noise-model hidden)"


def _posterior_lines(p: dict, likelihood: str, noise_model: bool = False) -> list[str]:
    """``posterior  lowrank-gaussian, D = 41, mean (41,), ...``; a mixture on one line, then one per member (with
    its noise precision for a regression: its training's only, when a noise model predicts)."""
    shapes = ", ".join(f"{k} {_shape_text(v)}" for k, v in p["arrays"].items())
    if "members" not in p:
        return [f"posterior  {p['type']}, D = {p['n_params']}, {shapes}"]
    K = len(p["members"])
    lines = [f"posterior  mixture of {K} member{'s' if K != 1 else ''} (equal weights, --members), D = {p['n_params']}"]
    for k, (m, tau) in enumerate(zip(p["members"], p["noise_precision"])):
        shapes = ", ".join(f"{n} {_shape_text(v)}" for n, v in m["arrays"].items())
        lines.append(f"  member {k + 1}  {m['type']} (/posterior/member_{k}), {shapes}"
                     + (f"; noise precision {tau:.4g}{' (training; the noise model predicts)' if noise_model else ''}"
                        if likelihood == "gaussian" else ""))
    return lines


def _shape_text(shape) -> str:
    if shape and isinstance(shape[0], list):
        return "[" + ", ".join(str(tuple(x)) for x in shape) + "]"
    return str(tuple(shape))



def _left_out(source: dict) -> str:
    """``; columns dropped 0; 16 rows with a missing value dropped``, or nothing."""
    text = ""
    if source.get("columns_dropped"):
        text += f"; columns dropped {', '.join(map(str, source['columns_dropped']))}"
    if source.get("rows_dropped"):
        text += f"; {source['rows_dropped']} rows with a missing value dropped"
    return text

def _columns(schema: dict, inputs: int) -> str:
    """``columns    7 feature columns -> 10 inputs; island categorical (3 levels), sex categorical (2 levels);
    missing values: impute`` for a run's stored data schema."""
    text = [f"{c['name']} {c['kind']}" + (f" ({len(c['levels'])} levels)" if c["kind"] == "categorical" else "")
            for c in schema["columns"] if c["kind"] != "numeric"]
    shown = ", ".join(text[:8]) + (f" and {len(text) - 8} more" if len(text) > 8 else "")
    return (f"columns    {len(schema['columns'])} feature columns -> {inputs} inputs" + (f"; {shown}" if text else "")
            + f"; missing values: {schema['missing']}")


def _compression_source(source: dict) -> str:
    """``/runs/a.h5 (sha256 0e3e66ffd0801673…, lowrank-gaussian)``; a run compressed in Python
    (``FitResult.compress``) has no file checksum, and no path unless it was saved or loaded."""
    where = source.get("path") or "a run in memory (Python)"
    known = ([f"sha256 {source['sha256'][:16]}…"] if source.get("sha256") else []) + [source["posterior"]]
    return f"{where} ({', '.join(known)})"


@click.command(cls=Command)
@click.argument("run_file", metavar="RUN.h5", type=click.Path(readable=False, dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, callback=needs_stdout, help="Print the description as one JSON object on stdout.")
def inspect(run_file, as_json):
    """Describe the run in RUN.h5: method, posterior shapes, configuration, data provenance, metrics."""
    run = read_run(run_file)
    s = summary(run, run_file)
    if as_json:
        emit_json(s)
        return
    c, d, m = s["config"], s["data"], s["metrics"]
    lines = [
        Text.assemble((run_file, "bold"), f"  (slang {s['slang_version']}, {s['created']})"),
        f"command    {shlex.join(s['command']) or '(none: made in Python)'}",
        f"method     {s['method']}  {c.get('hyper', {})}",
        *_posterior_lines(s["posterior"], s["model"]["likelihood"], "noise_weights" in s["model"]),
        f"model      sizes {tuple(s['model']['sizes'])}, "
        + (f"{s['model']['activation']} hidden units, " if len(s["model"]["sizes"]) > 2 else "no hidden layer, ")
        + f"{s['model']['likelihood']} likelihood"
        + (_noise_model_text(s["model"]) if "noise_weights" in s["model"] else ""),
        f"prior      precision {c.get('prior_precision')}, bias {c.get('bias_prior_precision')}"
        + (f", hidden biases {c['hidden_bias_prior_precision']}" if len(s["model"]["sizes"]) > 2
           and "hidden_bias_prior_precision" in c else ""),
        (_solved(m["solver"]) if "solver" in m else
         f"training   {c.get('n_steps')} steps, batch {c.get('batch_size')}, seed {c.get('seed')}, "
         f"{s['history']['epochs']} epochs recorded"
         + (f"; {c['members']} members, seeds {', '.join(map(str, c.get('member_seeds', [])))}"
            if c.get("members", 1) > 1 else "")),
        f"train data {d['train']['path'] or 'arrays from Python'}  "
        + (f"sha256 {d['train']['sha256'][:16]}…  " if d["train"].get("sha256") else "")
        + f"{d['train']['rows']} rows x {d['train']['features']} features ({d['train']['format']})"
        + _left_out(d["train"]),
    ]
    for earlier in s["resumed"]:
        member = f" of member {earlier['member'] + 1}" if isinstance(earlier.get("member"), int) else ""
        lines.append(f"resumed    at step {earlier.get('step')}{member}, from a checkpoint slang "
                     f"{earlier.get('slang_version')} wrote ({earlier.get('created')})")
    if d.get("schema"):
        lines.append(_columns(d["schema"], s["model"]["sizes"][0]))
    t = d.get("test")
    if t:
        lines.append(f"test data  {t['path']} ({t['rows']} rows)" if t["source"] == "file"
                     else f"test data  arrays from Python ({t['rows']} rows)" if t["source"] == "arrays"
                     else f"test data  {t['rows']} rows split off "
                          + (f"(UCI split {t['uci_split']})" if "uci_split" in t
                             else f"(fraction {t['test_fraction']}, seed {t['split_seed']})"))
    if d.get("labels"):
        classes = d["labels"]["classes"]
        # (a file's labels 0 and 1 are stored as the numbers 0.0 and 1.0: shown as the task line shows them)
        shown = [str(int(x)) if isinstance(x, float) and x.is_integer() else str(x) for x in classes]
        lines.append(f"labels     {', '.join(shown)} -> 0..{len(classes) - 1}")
    cal = s["calibration"]
    if cal:
        quantiles = ", ".join(f"{100 * float(k):g}% {'inf' if q is None else f'{q:.4g}'}"
                              for k, q in cal["quantiles"].items())
        lines.append(f"calibrated {cal['n']} rows held out (--calibrate {cal['fraction']:g}, seed {cal['seed']}), "
                     f"split-conformal score {_SCORE_TEXT.get(cal['score'], cal['score'])}; quantiles {quantiles}")
    if "test" in m and "rmse" in m["test"]:
        lines.append(f"test       RMSE {m['test']['rmse']:.4f}  log-likelihood {m['test']['loglik']:.4f}")
    elif "test" in m:
        lines.append(f"test       NLL {m['test']['nll']:.4f}  accuracy {m['test']['accuracy']:.4f}")
    if "train" in m:
        lines.append(f"train      -ELBO/N {m['train']['neg_elbo_per_example']:.4f}")
    comp = s["compression"]
    if comp:
        lines.insert(3, f"compressed from {_compression_source(comp['source'])} at rank {comp['rank']}: "
                        f"{comp['params_before']} -> {comp['params_after']} variational parameters")
    if not m:
        lines.append("metrics    none stored (slang evaluate scores this run)")
    if run.status == "checkpoint":
        member = f" of member {m['member'] + 1} of {m['members']}" if "member" in m else ""
        # (a checkpoint at its last step was trained; its scoring was stopped, and --resume scores it)
        trained = m.get("steps") == m.get("n_steps") and ("member" not in m or m["member"] + 1 == m["members"])
        lines.append(Text.assemble(
            (f"status     checkpoint at step {m.get('steps')} of {m.get('n_steps')}{member}"
             f"{', trained, not yet scored' if trained else ''}", "bold"),
            f" ({m.get('fit_seconds', 0.0):.1f} s so far); "
            + ("its data came from standard input or a pipe: --resume cannot read them again"
               if data_read_once(d)
               else f"{'score it' if trained else 'continue'} with: slang fit --resume {shlex.quote(run_file)}")))
    # (the file's own strings are text, never markup: only these two parts are bold)
    for line in lines:
        stderr.print(line if isinstance(line, Text) else Text(line))
