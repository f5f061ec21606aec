"""What a run reports: the JSON-lines log, plots, the model card, the run report, side-by-side evaluation."""
