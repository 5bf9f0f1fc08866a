"""The parts a stage is built from, on torch: the model cut into gather units (model.py), its
parameters as views into flat buffers (flat.py), Adam on a flat shard, on the device or offloaded
to the host (optim.py), the collectives on 1-D buffers and the process groups they run on
(collectives.py), and what a rank measures about itself (measure.py). None knows a stage, a run
or a launch."""
