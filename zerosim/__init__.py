"""zerosim: per-rank memory and step time of DDP, ZeRO-1/2/3, FSDP2, offload and hybrid sharding
on a simulated GPU cluster.

Pure Python (numpy, simpy, plotly); never imports torch or zero_real. Its layers, lowest first
(docs/architecture.md): the foundation (contract.py, units.py, errors.py, files.py,
commandline.py); hardware/ (one record per GPU and node); frameworks/ (what each framework
holds and runs); scenario/ (what a user gives); parallel/ (the mesh); analytic/ (memory and
FLOPs in closed form); sim/ (one step, simulated); report.py; calibration/ and tradeoffs/;
cli/ (the commands).
"""

__version__ = "0.1.0"
