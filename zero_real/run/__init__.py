"""A run of one stage on N ranks: what it is, as frozen dataclasses (runconfig.py); its ranks
started, supervised and stopped (launch.py), watched by their heartbeats (watch.py); its progress
shown on the launcher's stderr (progress.py); what each rank does and the measurement assembled
from them (train.py); and the lines printed when it is over (report.py)."""
