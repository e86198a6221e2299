"""The ACK backend (``arena``): a ``TrainingJobSpec`` run as a Kubeflow training job on ACK, created
the way ``arena submit`` does, so ``arena list/logs/delete`` treat it as their own.

- ``request``: the training CR and ConfigMap exactly as arena renders them, the one definition of
  each ACK setting (``AckSettings``) and the rules the cluster enforces, with no call and no
  connection (the dry run shows them);
- ``status``: what the CR and its pods say, in the backend's terms (states, pods in node order, the
  node that failed first, what ended or holds a pod);
- ``logs``: every started pod's new lines, merged by the kubelet's timestamps;
- ``failures``: why a job failed, from the pods' reasons and events to the failing node's output;
- ``backend``: :class:`AckBackend`, the calls, through the cncf.kubernetes hooks.

The package imports none of them itself: the environment file's model and the planner read
``request`` without loading the Kubernetes clients.
"""
