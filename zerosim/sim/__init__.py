"""The simulation layer: one training step of a stage on a simulated cluster (simpy).

engine.py runs it (which ranks to simulate, their collectives); rank.py is what a stage program may
do on its rank; stages/ is the stage programs (DDP, then what ZeRO-1, -2, -3 change); step_shape.py
the numbers they work from, priced by costs.py (presets or a calibration profile); network.py the
links; collectives/ the algorithms (ring, hierarchical) as phases over the links;
collective_bench.py one collective alone (`zerosim collective`); timeline.py a rank's memory;
trace.py the Chrome/Perfetto trace.
"""
