"""The PAI-DLC backend: a ``TrainingJobSpec`` run as a DLC job (Lingjun or ECS resources).

- ``request``: the CreateJob body, built with no call and no connection (the dry run shows it);
- ``status``: what GetJob says, in the backend's terms (states, phases, the node that failed
  first, why a job waits or ended);
- ``logs``: streaming GetPodLogs and searching a pod's tail;
- ``failures``: why a job failed, from DLC's verdict to the failing node's output;
- ``backend``: :class:`DlcBackend`, the calls, each through ``hooks.dlc.DlcHook``.

The package imports none of them itself: the DLC planner checks DLC's rules (``request.check_spec``)
without loading the backend's calls and the Airflow hooks they use.
"""
