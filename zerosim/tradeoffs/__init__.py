"""The trade-off layer: many simulations, and figures of them.

sweep.py (the cartesian product of varied keys, on every core; sweep_ray.py runs it as tasks on
a Ray cluster instead; sweep_files.py writes the rows as CSV or JSON), plan.py (which stage, how many
GPUs, how large a model), and the figures: plot_inputs.py reads result files, plots.py and
calibration_plot.py draw them (plotly), figures.py picks and writes one for `zerosim plot`.
"""
