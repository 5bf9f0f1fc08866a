"""`zero-real calibrate`: this box measured for zerosim. calibrate.py checks the request, starts
one world per process count and writes the profile; bench.py is what every rank of one world
measures (collectives, compute per unit, the optimizer, the real stages' memory and steps)."""
