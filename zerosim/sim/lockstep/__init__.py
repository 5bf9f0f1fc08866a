"""Every rank of a step at once, for jitter at thousands of ranks (the lockstep executor,
sim/executor.py).

strands.py runs each stream once for all ranks with numpy vectors of clocks; ranks.py is the
rank context it gives the stage programs (executor.Rank); replay.py replays one rank per order of
memory operations event by event and checks its times against the lockstep's to the bit;
budget.py estimates the memory of ranks simulated one by one and refuses a run past its budget.
"""
