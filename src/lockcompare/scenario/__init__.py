"""What a trial is asked to do, before anything runs: the experiments of the catalogue and their
claims, the fault-schedule language and its kinds, the settings table, and the trial spec they make.

Pure descriptions (no servers, no processes): the runner, the evaluation and the CLI read them.
"""
