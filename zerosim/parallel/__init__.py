"""The parallel layout: the mesh of axes a step's ranks form, derived once from the scenario
(mesh.py), from which every group a collective runs on and every "how many ways is this state
split" is read. A new parallelism axis is a new axis of the mesh, not an argument threaded
through the layers above."""
