"""From a posterior to predictions: per-example predictive uncertainty, the scores, the one predictive behind evaluate,
predict and the API, the regression mixture and prediction files."""
