"""How a pipeline's driver ends, as the control plane reads it: the process's exit code and,
for the codes that carry a reason, the heading of the one line that gives it at the end of
the driver's log. Any other code (a signal included) is a crash."""

from __future__ import annotations

EXIT_STOPPED = 0  # stopped on request (or the run's limit reached)
EXIT_SPEC = 2  # the spec cannot run (planning failed): restarting would not help
EXIT_RELAUNCH = 3  # a restore: start again from the requested checkpoint
EXIT_INTERRUPTED = 4  # the worker is shutting down: restart when a worker is back
EXIT_STATE = 5  # the state cannot be restored (corrupt, another circuit's): no retry helps
EXIT_FENCED = 6  # another writer claimed the object-store prefix: restarting would fight it
EXIT_HUNG = 7  # no step while input waited for the hang timeout: restarted like a crash

SPEC_ERROR_HEADING = "invalid pipeline spec:"  # how SpecError prints itself (EXIT_SPEC)
STATE_ERROR_HEADING = "state error:"  # the one-line reason of EXIT_STATE
FENCED_HEADING = "fenced:"  # of EXIT_FENCED
HUNG_HEADING = "hung:"  # of EXIT_HUNG
UDF_ERROR_HEADING = "udf error:"  # a Python UDF failed a step (a crash: restarted)
