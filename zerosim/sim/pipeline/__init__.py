"""Pipeline parallelism's step as a discrete-event simulation: each pipeline stage's compute and
communication streams and the point-to-point links between stages (events.py), fed by the plan
the scenario's numbers make (plan.py) and read back into the step's result (step.py)."""
